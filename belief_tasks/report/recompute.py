"""Recompute a task's results from its logged records with the task's own aggregations.

The aggregation of each metric is looked up where lm-eval itself finds it: the
task's YAML (``metric_list[].aggregation``, a ``!function`` into the family's
``utils.py`` shim, i.e. ``belief_tasks.tasks.<family>``, which calls
``belief_tasks.metrics.<family>``). The report therefore never re-implements a
metric, and every headline number can be checked against the results JSON.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from belief_tasks.report.loading import TaskRun

log = logging.getLogger("belief_tasks.report")

#: relative tolerance when comparing a recomputed number with the harness's
REL_TOL = 1e-9


@dataclass(frozen=True)
class Number:
    """One recomputed metric with the harness's own value beside it."""

    value: float
    stderr: float | None
    harness: float | None  # the results JSON's value (None: not there)

    @property
    def matches(self) -> bool | None:
        if self.harness is None:
            return None
        return same(self.value, self.harness)


def same(a, b) -> bool:
    a, b = _f(a), _f(b)
    if a is None or b is None:
        return a is b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def _f(x):
    if x is None or isinstance(x, str):
        return None
    return float(x)


# --------------------------------------------------------------------------- finding aggregations


def _yaml_folders() -> list[Path]:
    from belief_tasks.paths import task_yamls_dir

    folders = [task_yamls_dir()]
    try:  # the copy installed under lm-eval (wheel layout), if any
        import lm_eval.tasks

        installed = Path(lm_eval.tasks.__file__).parent / "belief"
        if installed.is_dir():
            folders.append(installed)
    except ImportError:
        pass
    return folders


@lru_cache(maxsize=1)
def task_yaml_index() -> dict[str, Path]:
    """Task name -> YAML file, over our task folders (first folder wins)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    index: dict[str, Path] = {}
    for folder in _yaml_folders():
        for path in sorted(folder.rglob("*.yaml")):
            try:
                cfg = load_yaml(path, resolve_func=False, recursive=False)
            except Exception:  # noqa: BLE001  a YAML lm-eval could not read either
                continue
            name = cfg.get("task")
            if isinstance(name, str):
                index.setdefault(name, path)
    return index


@lru_cache(maxsize=None)
def base_task(task: str) -> str:
    """The task a task's YAML includes, followed down (``belief_demo_bear`` -> ``belief_bear``); itself if none.

    Sections recognise a family by the base task's name, so a renamed variant of one of our
    tasks (a demo, a user's own YAML including ours) is reported with its family.
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    path = task_yaml_index().get(task)
    if path is None:
        return task
    try:
        include = load_yaml(path, resolve_func=False, recursive=False).get("include")
    except Exception:  # noqa: BLE001
        return task
    for inc in [include] if isinstance(include, str) else (include or []):
        target = (path.parent / inc).resolve()
        if not target.is_file():
            continue
        try:
            name = load_yaml(target, resolve_func=False, recursive=False).get("task")
        except Exception:  # noqa: BLE001
            continue
        if isinstance(name, str) and name != task and task_yaml_index().get(name) == target:
            return base_task(name)
    return task


@lru_cache(maxsize=None)
def aggregations(task: str) -> dict[str, Callable]:
    """``{metric: aggregation}`` of ``task`` as its YAML wires them; {} when the task is not ours."""
    from lm_eval.tasks._yaml_loader import load_yaml

    path = task_yaml_index().get(task)
    if path is None:
        return {}
    cfg = load_yaml(path, resolve_func=True, recursive=True)
    out = {}
    for entry in cfg.get("metric_list") or []:
        agg = entry.get("aggregation")
        if isinstance(agg, str):  # a registered name such as "mean"
            from lm_eval.api.registry import get_aggregation

            agg = get_aggregation(agg)
        if callable(agg):
            out[entry["metric"]] = agg
    return out


def stderr_function(agg: Callable) -> Callable | None:
    """The standard error lm-eval reports for ``agg`` (ours: ``agg.stderr``; lm-eval's own otherwise)."""
    own = getattr(agg, "stderr", None)
    if own is not None or hasattr(agg, "stderr"):
        return own
    try:
        from lm_eval.api.metrics import stderr_for_metric

        return stderr_for_metric(metric=agg, bootstrap_iters=100_000)
    except Exception:  # noqa: BLE001
        return None


# --------------------------------------------------------------------------- recomputing


def recompute(task: TaskRun, metrics: list[str] | None = None) -> dict[str, Number]:
    """Every metric of ``task`` (or the ``metrics`` asked for) from its records.

    Without logged samples, or for a metric whose aggregation is unknown, the
    harness's own number is passed through (``Number.value`` = the JSON's value).
    """
    aggs = aggregations(task.name)
    names = metrics or list(dict.fromkeys([*task.metric_names(), *aggs]))
    out = {}
    for m in names:
        harness, harness_se = task.value(m), task.value(m, stderr=True)
        agg = aggs.get(m)
        records = task.records(m) if (agg is not None and task.has_records) else []
        if not records:
            if harness is not None:
                out[m] = Number(float(harness), harness_se, harness)
            continue
        value = float(agg(records))
        se_fn = stderr_function(agg)
        se = None
        if se_fn is not None:
            try:
                se = float(se_fn(records))
            except Exception as e:  # noqa: BLE001  a stderr that cannot be computed is reported as such
                log.warning("%s %s: stderr failed (%s)", task.name, m, e)
        out[m] = Number(value, se, None if harness is None else float(harness))
    return out


def mismatches(numbers: dict[str, dict[str, Number]]) -> list[str]:
    """``task/metric`` names whose recomputed value differs from the results JSON."""
    return [f"{t}/{m}" for t, ns in numbers.items() for m, n in ns.items() if n.matches is False]
