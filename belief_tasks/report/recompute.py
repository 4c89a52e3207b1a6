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
from belief_tasks.scoring.common import NoStderr
from belief_tasks.scoring.wiring import Aggregation

log = logging.getLogger("belief_tasks.report")

#: relative tolerance when comparing a recomputed number with the harness's
REL_TOL = 1e-9


@dataclass(frozen=True)
class Number:
    """One recomputed metric with the harness's own value beside it. ``stderr``: a float, or ``NoStderr(reason)``
    (the metric's declaration says why, or the records leave it undefined: ``scoring.wiring.Aggregation.stderr``)."""

    value: float
    stderr: float | NoStderr
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
    numbers = {m: _number(task, m, aggs.get(m)) for m in names}
    return {m: n for m, n in numbers.items() if n is not None}


#: the standard error of a number the report passes through from a results JSON that holds none ("N/A", or absent)
NOT_IN_RESULTS = NoStderr("none in the results JSON, and no per-sample records to compute one from")


def _number(task: TaskRun, metric: str, agg: Aggregation | None) -> Number | None:
    """``metric`` of ``task`` recomputed by ``agg`` from its records; without records (or an aggregation of ours)
    the results JSON's own number, shown but not counted as checked; None where neither exists."""
    harness, harness_se = task.value(metric), task.value(metric, stderr=True)
    records = task.records(metric) if (agg is not None and task.has_records) else []
    if agg is None or not records:
        if harness is None:
            return None
        declared = agg.metric.stderr if agg is not None else None
        none = declared if isinstance(declared, NoStderr) else NOT_IN_RESULTS  # the declaration says why, if it does
        return Number(float(harness), none if harness_se is None else float(harness_se), None)
    try:
        found_se = agg.stderr(records)
        se = found_se if isinstance(found_se, NoStderr) else float(found_se)
    except Exception as e:  # noqa: BLE001  a stderr that cannot be computed is reported as such
        log.warning("%s %s: stderr failed (%s)", task.name, metric, e)
        se = NoStderr(f"its computation failed on these records ({type(e).__name__}: {e})")
    found = agg.interval(records)
    interval = None if found is None else (found.low, found.high)
    return Number(float(agg(records)), se, None if harness is None else float(harness), interval)


def mismatches(numbers: dict[str, dict[str, Number]]) -> list[str]:
    """``task/metric`` names whose recomputed value differs from the results JSON."""
    return [f"{t}/{m}" for t, ns in numbers.items() for m, n in ns.items() if n.matches is False]
