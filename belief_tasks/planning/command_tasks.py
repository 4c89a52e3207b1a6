"""A command's tasks and requests, built as its run builds them, without the model: what ``--estimate`` counts.

``configure`` parses a ``belief-eval`` command line as ``lm_eval run`` does; ``build_tasks`` builds its tasks as
``belief-eval`` does before the model (bad input refused in one paragraph, exit 2); ``count_command`` builds every
task's requests as ``evaluate`` would (``--limit``, the chat template from the tokenizer alone) and counts them
(``planning.cost``) with the model's tokenizer (``encoder_for``).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from belief_tasks.planning.cost import Encoder, TaskCost, count_task
from belief_tasks.planning.rates import TREE


def configure(args: list[str]):
    """lm-eval's ``EvaluatorConfig`` of a ``belief-eval`` command line (as ``lm_eval run`` parses it)."""
    from belief_tasks.hooks.lm_eval_api import evaluator_config

    return evaluator_config(args)


def build_tasks(cfg) -> dict[str, Any]:
    """The command's tasks, built as ``belief-eval`` builds them before the model (bad input refused in one
    paragraph, exit 2), with lm-eval's per-run overrides applied (``--gen_kwargs``)."""
    manager = cfg.process_tasks(cfg.metadata)
    loaded = manager.load(cfg.tasks)
    tasks = dict(loaded["tasks"])
    gen = cfg.gen_kwargs
    if gen:
        from belief_tasks.hooks.lm_eval_api import parse_args_string

        gen = parse_args_string(gen) if isinstance(gen, str) else gen
        for task in tasks.values():
            if task.get_config("output_type") == "generate_until":
                task.set_config(key="generation_kwargs", value=gen, update=True)
    return tasks


def encoder_for(model_args: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> Encoder | None:
    """The evaluated model's tokenizer and context length, without the model (None without a tokenizer)."""
    from belief_tasks.options import KnobError
    from belief_tasks.tasks.base import model_tokenizer

    try:
        tokenizer = model_tokenizer({**(metadata or {}), **model_args}, needed_for="the estimate")
    except KnobError:
        return None
    max_length = model_args.get("max_length") or model_args.get("max_model_len")
    if not max_length:
        from transformers import AutoConfig

        from belief_tasks.hooks.lm_eval_api import max_length as resolve_max_length

        try:
            config = AutoConfig.from_pretrained(
                str(model_args.get("pretrained") or model_args.get("model")),
                revision=model_args.get("revision") or "main",
            )
        except Exception:  # noqa: BLE001  the tokenizer's own limit, then lm-eval's default
            config = None
        max_length = resolve_max_length(config, tokenizer)
    add_bos = str(model_args.get("add_bos_token", "")).lower() in ("1", "true", "yes")
    return Encoder(tokenizer, int(max_length), add_bos)


def chat_template(encoder: Encoder):
    """lm-eval's ``HFLM.apply_chat_template``, from the tokenizer alone."""

    def apply(history, add_generation_prompt: bool = True) -> str:
        return encoder.tokenizer.apply_chat_template(
            history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )

    return apply


def count_command(
    cfg, tasks: Mapping[str, Any], encoder: Encoder, *, sharing: str | None = TREE, block_size: int = 16
) -> tuple[list[TaskCost], float]:
    """Every task's requests built (as ``evaluate`` builds them: ``--limit``, chat template) and counted, prefixes
    shared as ``sharing`` (``cost.count_instances``); the seconds both took (a run's building of requests tokenises
    them too: the truncation check)."""
    from belief_tasks.hooks.lm_eval_api import sample_size as get_sample_size
    from belief_tasks.tasks.base import BeliefTask

    costs, built = [], 0.0
    for task in tasks.values():
        t0 = time.perf_counter()
        task.build_all_requests(
            limit=get_sample_size(task, cfg.limit),
            rank=0,
            world_size=1,
            cache_requests=False,
            rewrite_requests_cache=False,
            system_instruction=cfg.system_instruction,
            apply_chat_template=bool(cfg.apply_chat_template),
            fewshot_as_multiturn=cfg.fewshot_as_multiturn,
            chat_template=chat_template(encoder) if cfg.apply_chat_template else None,
            tokenizer_name=getattr(encoder.tokenizer, "name_or_path", "") if cfg.apply_chat_template else "",
        )
        family = task.FAMILY if isinstance(task, BeliefTask) else ""
        costs.append(count_task(task, encoder, family, sharing, block_size))
        built += time.perf_counter() - t0  # counting stands in for the run's truncation check (it tokenises too)
    return costs, built


def budgeted(tasks: Mapping[str, Any]) -> dict[str, bool]:
    from belief_tasks.tasks.base import BeliefTask

    return {n: isinstance(t, BeliefTask) and t.options.budget is not None for n, t in tasks.items()}
