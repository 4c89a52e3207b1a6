"""One model state (a checkpoint on disk, or the model in memory) scored on tasks built once, written as lm-eval writes.

The Trainer callback (``training.callback``) and ``belief-eval sweep`` (``training.sweep``) evaluate many states of one
model on the same tasks. Both go through lm-eval's public routes only:

* ``build_tasks``: a ``TaskManager`` (our task folder on its include path) loads the tasks once; the built
  ``Task`` / ``Group`` objects are handed to every later ``simple_evaluate`` (``TaskManager.load`` takes
  built objects as they are). lm-eval's ``evaluate`` re-runs ``build_all_requests`` on each call, which
  rebuilds every task's ``Instance`` list from its documents (the documents, prompts and knob parsing are
  not redone) and re-measures the requests against the model being scored (``truncation``).
* ``evaluate``: ``simple_evaluate(model=<LM object>, tasks=<built>, use_cache=<path>)``; lm-eval's request
  cache (``CachingLM``; our backends read our own request types back, ``harness.read_through``) keeps every
  answer as it is computed, so a state whose run was killed is resumed from its cache.
* ``write``: ``EvaluationTracker.save_results_aggregated`` / ``save_results_samples``, as ``lm_eval run
  --output_path OUT --log_samples`` writes them, so ``belief-report`` reads them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)


def build_tasks(
    tasks: Sequence[str], metadata: Mapping[str, Any] | None = None, model_args: Mapping[str, Any] | None = None
) -> tuple[Any, list]:
    """``(task_manager, built)``: our tasks (and any of lm-eval's) built once, bad knobs refused here.

    ``model_args``: the keys a model argument may use in ``metadata`` (so that a misspelt knob is an error,
    as under ``belief-eval``)."""
    import belief_tasks
    from belief_tasks.commands import checks
    from belief_tasks.paths import task_yamls_dir

    belief_tasks.install()
    keys = frozenset(model_args or {})
    checks.check_unknown_keys(dict(metadata or {}), keys)
    from belief_tasks.hooks import lm_eval_api

    installed = (lm_eval_api.tasks_folder() / "belief").is_dir()  # the wheel put them under lm-eval
    include = None if installed else str(task_yamls_dir())  # as belief-eval: our folder unless installed
    # our folder alone where it holds every requested name: lm-eval's own index costs 10-15 s a checkpoint
    manager = lm_eval_api.task_manager(list(tasks), include, task_yamls_dir(), metadata=dict(metadata or {}))
    loaded = manager.load(list(tasks))
    checks.declare_model_args(loaded["tasks"].values(), keys)
    checks.check_knobs_read(dict(metadata or {}), loaded["tasks"].values(), keys)
    return manager, [*loaded["groups"].values(), *loaded["tasks"].values()]


def evaluate(
    lm,
    manager,
    built: list,
    *,
    model_args: Mapping[str, Any],
    cache: Path | None = None,
    bootstrap_iters: int = 100_000,
    seed: int | None = 0,
    **kwargs,
) -> dict:
    """lm-eval's ``simple_evaluate`` of an ``LM`` object on the built tasks; ``model_args`` is what its results
    JSON records under ``config.model_args`` (the checkpoint: ``report.training`` reads the step there).
    ``seed``: lm-eval's four seeds (it sets the global RNGs: the callback restores them after)."""
    from lm_eval import simple_evaluate

    if cache is not None:
        Path(cache).parent.mkdir(parents=True, exist_ok=True)
    return simple_evaluate(
        model=lm,
        model_args=dict(model_args),
        tasks=list(built),
        task_manager=manager,
        use_cache=None if cache is None else str(cache),
        log_samples=True,
        bootstrap_iters=bootstrap_iters,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
        **kwargs,
    )


def write(results: dict, output_path: Path, model_args: Mapping[str, Any]) -> Path:
    """The results JSON and one samples file per task under ``output_path/<model name>/``, by lm-eval's
    ``EvaluationTracker``; returns the folder."""
    from lm_eval.loggers import EvaluationTracker

    results = dict(results)
    samples = results.pop("samples", None)
    tracker = EvaluationTracker(output_path=str(output_path))
    tracker.general_config_tracker.log_experiment_args(
        model_source="hf",
        model_args=",".join(f"{k}={v}" for k, v in model_args.items()),
        system_instruction=None,
        chat_template=None,
        fewshot_as_multiturn=False,
    )
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results.get("configs", {}):
        if samples and task in samples:
            tracker.save_results_samples(task_name=task, samples=samples[task])
    return Path(output_path) / tracker.general_config_tracker.model_name_sanitized


def headline(results: dict) -> dict[str, float]:
    """``{"<task>/<metric>": value}`` plus ``.../low``, ``.../high`` (budgeted runs) for each task's family's
    headline metric, as the Trainer's log takes them (floats only)."""
    from belief_tasks.families import FAMILIES

    out: dict[str, float] = {}
    for task, cfg in results.get("configs", {}).items():
        family = FAMILIES.get((cfg.get("metadata") or {}).get("family", ""))
        numbers = results.get("results", {}).get(task, {})
        if family is None:
            continue
        for key, number in numbers.items():
            name, _, _filter = key.partition(",")
            if name == family.headline and isinstance(number, (int, float)):
                out[f"{task}/{name}"] = float(number)
            elif name == f"{family.headline}_stderr" and isinstance(number, (int, float)):
                out[f"{task}/{name}"] = float(number)
            elif name == f"{family.headline}_ci95" and isinstance(number, list) and len(number) == 2:
                out[f"{task}/{family.headline}_low"], out[f"{task}/{family.headline}_high"] = map(float, number)
    return out


def finished(folder: Path) -> bool:
    """Whether ``folder`` (one state's output) already holds a results JSON with every task's samples."""
    for results in Path(folder).glob("**/results_*.json"):
        data = json.loads(results.read_text(encoding="utf-8"))
        if all(list(results.parent.glob(f"samples_{t}_*.jsonl")) for t in data.get("configs", {})):
            return True
    return False
