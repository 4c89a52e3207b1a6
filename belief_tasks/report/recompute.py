"""Recompute a task's results from its logged records with the task's own aggregations.

The aggregation of each metric, and its standard error, come from the task family's metric table
(``belief_tasks.scoring.<family>.METRICS``, the table that wires the task's ``metric_list``,
found through ``belief_tasks.families``), which calls ``belief_tasks.metrics.<family>``.
The report therefore never re-implements a metric, and every headline number can be checked
against the results JSON.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from belief_tasks.families import aggregations as family_aggregations
from belief_tasks.report.loading import TaskRun
from belief_tasks.scoring.wiring import Aggregation

log = logging.getLogger("belief_tasks.report")

#: relative tolerance when comparing a recomputed number with the harness's
REL_TOL = 1e-9


@dataclass(frozen=True)
class Number:
    """One recomputed metric with the harness's own value beside it."""

    value: float
    stderr: float | None
    harness: float | None  # the results JSON's value (None: not there)
    interval: tuple[float, float] | None = None  # a budgeted run's 95 % interval (``scoring.budgeted``)

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


def aggregations(task: TaskRun) -> dict[str, Aggregation]:
    """``{metric: aggregation}`` of ``task``: its family's metric table (the one that wires its
    ``metric_list``), each as lm-eval ran it (``scoring.wiring.Aggregation``: the estimates of the full run on a
    budgeted run's records); {} when the task is not ours."""
    return family_aggregations(task.family)


# --------------------------------------------------------------------------- recomputing


def recompute(task: TaskRun, metrics: list[str] | None = None) -> dict[str, Number]:
    """Every metric of ``task`` (or the ``metrics`` asked for) from its records.

    Without logged samples, or for a metric whose aggregation is unknown, the
    harness's own number is passed through (``Number.value`` = the JSON's value).
    """
    aggs = aggregations(task)
    # the task's own metrics: in its results JSON or logged per sample (a family table may list more,
    # e.g. belief_mlm's prompt and content-free tasks share one)
    own = set(task.metric_names()) | set(task.logged_metrics())
    names = metrics or [m for m in dict.fromkeys([*task.metric_names(), *aggs]) if m in own]
    out = {}
    for m in names:
        harness, harness_se = task.value(m), task.value(m, stderr=True)
        agg = aggs.get(m)
        records = task.records(m) if (agg is not None and task.has_records) else []
        if agg is None or not records:
            if harness is not None:  # shown, but not recomputed: nothing to compare, not counted as checked
                out[m] = Number(float(harness), harness_se, None)
            continue
        value = float(agg(records))
        se_fn = agg.stderr_function
        se = None
        if se_fn is not None:
            try:
                se = float(se_fn(records))
            except Exception as e:  # noqa: BLE001  a stderr that cannot be computed is reported as such
                log.warning("%s %s: stderr failed (%s)", task.name, m, e)
        found = agg.interval(records)
        out[m] = Number(
            value, se, None if harness is None else float(harness), None if found is None else (found.low, found.high)
        )
    return out


def mismatches(numbers: dict[str, dict[str, Number]]) -> list[str]:
    """``task/metric`` names whose recomputed value differs from the results JSON."""
    return [f"{t}/{m}" for t, ns in numbers.items() for m, n in ns.items() if n.matches is False]
