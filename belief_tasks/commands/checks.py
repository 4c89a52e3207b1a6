"""What ``belief-eval`` checks in a command line before the model loads, besides each task's own input
(docs/data.md): JSON arguments, the backend's name, the task names, and that every knob of ours in
``--metadata`` is read by some task of the command. A failure is a ``CommandError`` (or a ``KnobError``)
whose text is the paragraph ``cli.refuse`` prints before exiting with status 2.
"""

from __future__ import annotations

import difflib
import glob
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from belief_tasks.options import KnobError


class CommandError(ValueError):
    """A command line that cannot run as typed (bad JSON, unknown backend or task)."""


#: lm-eval options that take a JSON object (lm-eval's ``MergeDictAction``), with a valid example each
JSON_EXAMPLES = {
    "--metadata": '\'{"source": "sample", "max_facts_per_relation": 5}\'',
    "--model_args": '\'{"pretrained": "EleutherAI/pythia-160m", "dtype": "float32"}\' '
    "(or pretrained=EleutherAI/pythia-160m,dtype=float32)",
    "--gen_kwargs": "'{\"temperature\": 0}' (or temperature=0)",
}


def shipped_pages(text: str) -> str:
    """A pointer to ``docs/<page>.md`` (a checkout's path, which a pip user lacks) as the command that prints
    the page from the installed package: `python -m belief_tasks docs <page>`."""
    import re

    return re.sub(r"`?\bdocs/([a-z_]+)\.md`?", r"`python -m belief_tasks docs \1`", text)


def did_you_mean(name: str, known: Iterable[str], n: int = 3) -> str:
    """ "did you mean 'a' or 'b'? " for the closest known names ("" when none is close)."""
    close = difflib.get_close_matches(name, list(known), n=n, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


# --- JSON arguments (before lm-eval parses the command line) ------------------------------------


def _values(args: list[str], option: str) -> Iterable[str]:
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            yield args[i + 1]
        elif arg.startswith(option + "="):
            yield arg.split("=", 1)[1]


def check_json_arguments(args: list[str]) -> None:
    """A value holding ``{`` must be JSON, as lm-eval reads it; lm-eval itself stops with a traceback."""
    for option, example in JSON_EXAMPLES.items():
        for value in _values(args, option):
            if "{" not in value:
                continue  # the key=value form: lm-eval's own parser reads it
            try:
                json.loads(value)
            except json.JSONDecodeError as e:
                raise CommandError(bad_json(option, value, e, example)) from None


def bad_json(option: str, value: str, error: json.JSONDecodeError, example: str) -> str:
    near = value[max(0, error.pos - 20) : error.pos] + " >>>" + value[error.pos : error.pos + 20]
    return (
        f"{option} is not valid JSON: {error.msg[0].lower() + error.msg[1:]} at character {error.pos + 1} of "
        f"{value!r} (marked >>>: {near.strip()!r}). JSON wants double quotes around every key and text value, "
        f"lowercase true / false / null and no trailing comma; a valid example: {option} {example}"
    )


# --- a request cache holds one model's answers ---------------------------------------------------


def check_cache_identity(args: list[str]) -> None:
    """``--use_cache PREFIX`` filled by another model, backend or setting is refused (``hooks.answer_cache``)."""
    from belief_tasks.hooks import answer_cache

    prefixes = [*_values(args, "--use_cache"), *_values(args, "-c")]
    if not prefixes:
        return
    backend = next(iter(reversed(list(_values(args, "--model")))), None)
    model_args = answer_cache.parse_model_args(_values(args, "--model_args"))
    try:
        warning = answer_cache.check(prefixes[-1], backend, model_args)
    except answer_cache.CacheIdentityError as e:
        raise CommandError(str(e)) from None
    if warning:
        print(warning, file=sys.stderr, flush=True)


# --- backend and task names (before the tasks are built) --------------------------------------------


def check_backend(name: str | None) -> None:
    """A ``--model`` lm-eval does not know (the closest names), or one that needs vLLM where it is missing
    (``backend_registry``: refused before the tasks are built, rather than an import traceback after them)."""
    from belief_tasks.backend_registry import backend, targets
    from belief_tasks.hooks.lm_eval_api import registered_models

    known = registered_models()
    if (name or "hf") in known:
        if backend(name).needs_vllm and importlib.util.find_spec("vllm") is None:
            raise CommandError(
                f"--model {name}: this runs on vLLM's offline engine, and vLLM is not installed in this Python "
                f"({sys.executable}); on a CPU `bash scripts/setup_vllm.sh` builds .venv-vllm with vLLM's CPU build "
                "(run belief-eval there: .venv-vllm/bin/belief-eval ...); on a GPU install vLLM beside"
                " lm-eval (docs/backends_support.md)"
            )
        return
    mine = targets()
    theirs = [k for k in known if k not in mine]
    raise CommandError(
        f"--model {name}: no backend of that name; {did_you_mean(name or '', known)}ours are "
        f"{', '.join(sorted(mine))}; lm-eval's are {', '.join(theirs)}"
    )


def check_engine_settings(args: list[str]) -> None:
    """``--model vllm`` or ``vllm-shared`` on vLLM's CPU build: a setting its engine would refuse to start with
    (memory fraction, KV cache space, block size: ``backends.vllm_cpu``) is named in one paragraph before anything
    is built or loaded, instead of vLLM's traceback after its start-up."""
    from belief_tasks.hooks.answer_cache import parse_model_args

    backend = next(iter(reversed(list(_values(args, "--model")))), None)
    if backend not in ("vllm", "vllm-shared") or importlib.util.find_spec("vllm") is None:
        return  # another backend; without vLLM check_backend refuses it
    from belief_tasks.backends.vllm_cpu import CPU_BLOCK_SIZE, startup_problem

    model_args = parse_model_args(_values(args, "--model_args"))
    if backend == "vllm-shared":  # its block size on a CPU where none is given
        model_args.setdefault("block_size", CPU_BLOCK_SIZE)
    problem = startup_problem(model_args)
    if problem:
        raise CommandError(f"--model {backend}: {problem}")


def unknown_tasks(requested: Iterable[Any], include_path: str | None) -> CommandError | None:
    """The error for the names in ``requested`` that lm-eval does not know (None when it knows them all)."""
    from lm_eval.tasks import TaskManager

    names = [t for t in requested if isinstance(t, str)]
    manager = TaskManager(include_path=include_path)
    missing = []
    for name in names:
        if name.endswith(".yaml"):
            if not glob.glob(name):
                missing.append(f"{name!r} (no such file)")
        elif not manager.match_tasks([name]) and not Path(name).is_dir():
            hint = did_you_mean(name, manager.all_tasks).rstrip()
            missing.append(f"{name!r}" + (f" ({hint})" if hint else ""))
    if not missing:
        return None
    return CommandError(
        f"--tasks: no task or group named {', '.join(missing)}. `belief-eval ls belief` lists our "
        "tasks and groups with one line each; `belief-eval ls tasks` every task lm-eval knows"
    )


# --- every knob of ours is read by a task of the command (after the tasks are built) ---------------


def knobs_of(task) -> set[str]:
    """The ``--metadata`` keys a built task of ours reads: its family's knobs, ``source``, and the path
    and revision knobs of the dataset it reads (``bear_path`` only for tasks on BEAR)."""
    from belief_tasks.options import knob_rows
    from belief_tasks.tasks.base import BeliefTask, Probe

    if not isinstance(task, BeliefTask):
        return set()
    fn = task.config.custom_dataset
    return (
        {k.name for k in knob_rows(task.OPTIONS)}
        | {"source"}
        | (_dataset_knobs(fn.dataset) if isinstance(fn, Probe) else set())
    )


def _dataset_knobs(dataset: str) -> set[str]:
    return {f"{dataset}_path", f"{dataset}_revision"}


def _our_knob_names() -> set[str]:
    from belief_tasks.data.sources import SOURCE_KNOBS
    from belief_tasks.families import knob_names

    return knob_names() | {k.name for k in SOURCE_KNOBS}


def check_unknown_keys(metadata: Mapping[str, Any] | None, model_args: Iterable[str]) -> None:
    """Before any task is built (no data read yet): a ``--metadata`` key that is neither a knob of ours, nor
    lm-eval's own, nor one of the run's model-argument keys is refused (``tasks.base.check_metadata``)."""
    from belief_tasks.options import Options
    from belief_tasks.tasks.base import check_metadata

    check_metadata(metadata, Options, model_args=frozenset(model_args))


def declare_model_args(tasks: Iterable[Any], model_args: Iterable[str]) -> None:
    """The run's model-argument keys handed to each built task of ours (``BeliefTask.declare_model_args``):
    a key they cover is not warned of as a possible misspelt knob."""
    from belief_tasks.tasks.base import BeliefTask

    for task in tasks:
        if isinstance(task, BeliefTask):
            task.declare_model_args(model_args)


def check_knobs_read(metadata: Mapping[str, Any] | None, tasks: Iterable[Any], model_args: Iterable[str]) -> None:
    """Refuse a knob of ours that no task of the command reads (it would be silently ignored), and the ``shard`` knob
    beside a task that is not ours (it would run whole in every shard). Keys that are not ours (model arguments,
    other harness tasks' metadata) are left to their readers."""
    from belief_tasks.tasks.base import BeliefTask

    tasks = list(tasks)
    ours = [t for t in tasks if isinstance(t, BeliefTask)]
    others = [str(t.config.task) for t in tasks if not isinstance(t, BeliefTask)]
    if (metadata or {}).get("shard") not in (None, "", "none") and others:
        raise KnobError(
            "shard",
            f"cuts only our tasks by relation, and {', '.join(others)} would run whole in every shard (and not pool): "
            "run it in a command of its own",
        )
    read = set().union(*(knobs_of(t) for t in ours)) if ours else set()
    for key in sorted(set(metadata or {}) - set(model_args)):
        if key in _our_knob_names() and key not in read:
            run = ", ".join(t.config.task for t in ours) or "no task of ours"
            raise KnobError(
                key,
                f"no task of this command reads it (it runs {run}); {readers(key)}. "
                f"Add such a task to --tasks or leave the key out{_env_hint(key)}",
            )


def _env_hint(key: str) -> str:
    """For a data path: where to keep it for every command (the environment, read only where needed)."""
    from belief_tasks.data.sources import DATASETS

    info = next((i for i in DATASETS.values() if i.metadata_key == key), None)
    return (
        f" (a path you keep for every command belongs in {info.env_var}, read only by the tasks on {info.title})"
        if info
        else ""
    )


def readers(key: str) -> str:
    """Which of our tasks read ``key``, for the error (the main job's fixed variants left out)."""
    from belief_tasks.commands.catalog import entries
    from belief_tasks.families import FAMILIES
    from belief_tasks.hooks.lm_eval_api import load_yaml
    from belief_tasks.tasks.base import Probe

    names = []
    for e in entries():
        if e.kind != "task" or e.is_demo or e.family not in FAMILIES:
            continue
        fn = load_yaml(e.path).get("custom_dataset")  # the YAML's own function, as lm-eval resolves it
        if key in {k.name for k in FAMILIES[e.family].knobs} or (
            isinstance(fn, Probe) and key in _dataset_knobs(fn.dataset)
        ):
            names.append(e.name)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"it is read by {shown}" if names else "no task of ours reads it"


# --- a budget evaluates every fact it draws --------------------------------------------------------


def check_budget_without_limit(tasks: Mapping[str, Any], limit: float | None) -> None:
    """``--limit`` would cut a budgeted task's drawn facts, and its estimates need every one of them: each built
    task of ours, its parsed knobs checked by ``tasks.base.check_budget`` (the budget's rules, in one place)."""
    from belief_tasks.tasks.base import BeliefTask, check_budget

    if limit is None:
        return
    for name, task in tasks.items():
        if isinstance(task, BeliefTask):
            check_budget(task.options, limit=limit, task=name)
