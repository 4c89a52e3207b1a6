"""What every family's scoring shares: the declaration of a metric (``Metric``, the rows of a family's
``METRICS``), an aggregation's standard error, the one memo of what is derived from a run's records, the
record logged once under several metric names, and the "most templates" form of a known-fact rule.

Pure Python: no lm-eval, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

#: the attribute ``with_stderr`` sets on an aggregation
STDERR = "stderr"


def with_stderr(stderr: Callable[[list], float] | None, name: str | None = None) -> Callable[[Callable], Callable]:
    """Mark an aggregation over records with its standard error (``None``: it has none, as a spread has
    none) and, for aggregations built in a loop, its name (what the YAMLs' ``!function utils.<name>`` finds)."""

    def deco(agg: Callable) -> Callable:
        setattr(agg, STDERR, stderr)
        if name:
            agg.__name__ = agg.__qualname__ = name
        return agg

    return deco


def has_stderr_decision(agg: Callable) -> bool:
    """Whether ``agg`` is one of ours, marked by ``with_stderr`` (lm-eval's own aggregations are not)."""
    return hasattr(agg, STDERR)


def stderr_function(agg: Callable) -> Callable[[list], float] | None:
    """The standard error an aggregation of ours gets: the one decision that lm-eval's results (through
    ``belief_tasks.harness``) and ``belief-report``'s recomputed numbers both read. None: it has none."""
    return getattr(agg, STDERR, None)


@dataclass(frozen=True)
class NotEstimable:
    """A metric whose full-data value a budgeted run's sample cannot estimate (it reports NaN, with no
    standard error and no interval), and why."""

    reason: str


@dataclass(frozen=True)
class Metric:
    """One metric of a family, declared once, in its ``METRICS`` (metric name -> ``Metric``): what the task
    classes wire into lm-eval's ``metric_list`` (``BeliefTask.metric_table``), what ``belief-report``
    recomputes and what a budgeted run estimates.

    ``aggregation``: records -> value, marked with its standard error (``with_stderr``; read back as
    ``stderr``). ``budgeted``: the metric's statistic of stratum totals on a budgeted run (a function of
    ``metrics.budgeted.<family>``, ``belief_tasks.metrics.intervals.Statistic``), ``NotEstimable(reason)``, or
    None in a family that takes no budget (``Family.budgeted`` None: BELIEF for encoders)."""

    aggregation: Callable[[list], Any]
    higher_is_better: bool
    budgeted: Callable | NotEstimable | None

    @property
    def stderr(self) -> Callable[[list], float] | None:
        """The aggregation's standard error (``stderr_function``; None: it has none)."""
        return stderr_function(self.aggregation)

    @property
    def estimable(self) -> bool:
        """Whether a budgeted run estimates the metric (it has a statistic)."""
        return self.budgeted is not None and not isinstance(self.budgeted, NotEstimable)


def budget_statistics(metrics: Mapping[str, Metric]) -> dict[str, Callable]:
    """metric -> its budgeted statistic, for the metrics a budgeted run estimates (in table order)."""
    return {name: m.budgeted for name, m in metrics.items() if m.estimable}


def not_estimable(metrics: Mapping[str, Metric]) -> tuple[str, ...]:
    """The metrics declared ``NotEstimable`` (NaN on a budgeted run)."""
    return tuple(name for name, m in metrics.items() if isinstance(m.budgeted, NotEstimable))


class Memo:
    """What a family derives from one run's records (columns, draws, per-fact quantities), computed once.

    lm-eval hands every metric, and then its standard error, its own list of the same record objects;
    the report asks for every metric of a task in turn. While the records are the same objects in the
    same order, ``get`` returns what was computed for them; other records start afresh. The memo keeps
    the records it was computed for, so their identity is a safe key."""

    def __init__(self) -> None:
        self._records: list = []
        self._values: dict = {}

    def get(self, records: Sequence, key: Hashable, compute: Callable[[], Any]) -> Any:
        if len(records) != len(self._records) or any(a is not b for a, b in zip(records, self._records)):
            self._records, self._values = list(records), {}
        if key not in self._values:
            self._values[key] = compute()
        return self._values[key]


class SameRecord:
    """A record under every metric name but the one that logs it: the same object for the aggregations,
    and in the samples file (lm-eval writes ``str()`` of what JSON cannot hold) one short reference
    ``<same as METRIC>`` instead of a copy, which ``belief_tasks.report.loading`` resolves."""

    __slots__ = ("record", "logged_under")

    def __init__(self, record: dict, logged_under: str) -> None:
        self.record = record
        self.logged_under = logged_under

    def __str__(self) -> str:
        return f"<same as {self.logged_under}>"

    __repr__ = __str__


#: how a ``SameRecord`` reads in the samples file: a metric value that stands for the value logged under
#: another metric of the same line
SAME_AS = re.compile(r"<same as ([^<>]+)>")


def records_behind(items: Iterable) -> list:
    """The records behind ``items`` (``SameRecord`` references resolved)."""
    return [x.record if isinstance(x, SameRecord) else x for x in items]


class Bound(float):
    """An interval's bound as lm-eval prints it: four decimals in the results table (lm-eval's ``make_table``
    prints a list's items by their ``repr``), the full float in the results JSON (``json`` writes floats
    with ``float.__repr__``)."""

    def __repr__(self) -> str:
        return f"{float(self):.4f}"

    __str__ = __repr__


def logged_once(values: dict) -> dict:
    """``process_results``' metric -> value with each record object written once: under the first metric
    that holds it, and under every later one a ``SameRecord`` of it (a short reference in the samples file)."""
    first: dict[int, str] = {}
    out = {}
    for metric, value in values.items():
        if isinstance(value, SameRecord) or not isinstance(value, dict):
            out[metric] = value
            continue
        owner = first.setdefault(id(value), metric)
        out[metric] = value if owner == metric else SameRecord(value, owner)
    return out


def on_records(agg: Callable) -> Callable:
    """An aggregation of ours (``with_stderr``), and its standard error, applied to the records behind
    ``SameRecord`` references; any other aggregation (lm-eval's own) is returned as it is."""
    if not has_stderr_decision(agg) or getattr(agg, "reads_records", False):
        return agg
    own = stderr_function(agg)

    def value(items: list):
        return agg(records_behind(items))

    value.stderr = None if own is None else (lambda items: own(records_behind(items)))
    value.reads_records = True
    value.__name__ = value.__qualname__ = getattr(agg, "__name__", "aggregation")
    value.__wrapped__ = agg
    return value


def most_templates(records: Iterable[dict], correct: Callable[[dict], bool]) -> dict[str, bool]:
    """fact -> known when the fact is right under more than half of its templates; a template counts as
    right when any of its records (prompts: subject expressions) is ``correct``."""
    right: dict[str, dict[str, bool]] = {}
    for r in records:
        per_template = right.setdefault(r["fact_id"], {})
        per_template[r["template_id"]] = per_template.get(r["template_id"], False) or bool(correct(r))
    return {f: sum(t.values()) * 2 > len(t) for f, t in right.items()}
