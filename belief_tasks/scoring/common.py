"""What every family's scoring shares: the declaration of a metric (``Metric``, the rows of a family's
``METRICS``: its aggregation, its standard error or why it has none, its direction, its budgeted statistic), the one
memo of what is derived from a run's records (``once``), the record logged once under several metric names, and the
"most templates" form of a known-fact rule. What lm-eval is handed for a ``Metric`` is derived from it in one place:
``belief_tasks.scoring.wiring``.

Pure Python: no lm-eval, no torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence


class NoStderr(str):
    """No standard error, and why: the one value for it from a metric's declaration to the results JSON and the
    report. It is the string lm-eval itself writes for a standard error it cannot compute, ``"N/A"`` (so lm-eval
    prints it, writes it into the results JSON and reads it back as its own), carrying its ``reason``, which
    ``belief-report`` prints under the tables.

    Declared in a ``Metric`` (a spread over draws, a count, a total: ``NoStderr(reason)``), or handed on by
    ``scoring.wiring`` where a standard error is undefined on a run's records (``UNDEFINED``) or a budgeted run cannot
    estimate the metric (its ``NotEstimable`` reason)."""

    reason: str

    def __new__(cls, reason: str) -> NoStderr:
        self = super().__new__(cls, "N/A")
        self.reason = reason
        return self

    def __getnewargs__(self) -> tuple[str]:  # pickled and copied with its reason
        return (self.reason,)

    def __repr__(self) -> str:
        return f"NoStderr({self.reason!r})"


#: a standard error that its own formula leaves undefined on a run's records (NaN: a spread over one template, one
#: relation or one fact)
UNDEFINED = NoStderr("undefined on these records: the spread it is computed from needs two or more units")


def defined(stderr: float) -> float | NoStderr:
    """``stderr``, or ``UNDEFINED`` where it is NaN."""
    return UNDEFINED if isinstance(stderr, float) and stderr != stderr else stderr


@dataclass(frozen=True)
class NotEstimable:
    """A metric whose full-data value a budgeted run's sample cannot estimate (it reports NaN, with no
    standard error and no interval), and why."""

    reason: str


@dataclass(frozen=True)
class Metric:
    """One metric of a family, declared once, in its ``METRICS`` (metric name -> ``Metric``): what the task
    classes wire into lm-eval's ``metric_list`` (``BeliefTask.metric_table``, through ``scoring.wiring``), what
    ``belief-report`` recomputes and what a budgeted run estimates.

    ``aggregation``: records -> value. ``stderr``: records -> its standard error, or ``NoStderr(reason)``.
    ``higher_is_better``: the metric's direction. ``budgeted``: the metric's statistic of stratum totals on a
    budgeted run (a function of ``metrics.budgeted.<family>``, ``belief_tasks.metrics.intervals.Statistic``),
    ``NotEstimable(reason)``, or None in a family that takes no budget (``Family.budgeted`` None: BELIEF for
    encoders)."""

    aggregation: Callable[[list], Any]
    stderr: Callable[[list], float] | NoStderr
    higher_is_better: bool
    budgeted: Callable | NotEstimable | None

    @property
    def stderr_function(self) -> Callable[[list], float] | None:
        """The standard error as a function of the records; None when the metric has none (``NoStderr``)."""
        return None if isinstance(self.stderr, NoStderr) else self.stderr

    @property
    def has_stderr(self) -> bool:
        """Whether the metric has a standard error on a full run (else ``stderr`` is ``NoStderr(reason)``)."""
        return not isinstance(self.stderr, NoStderr)

    @property
    def estimable(self) -> bool:
        """Whether a budgeted run estimates the metric (it has a statistic)."""
        return self.budgeted is not None and not isinstance(self.budgeted, NotEstimable)


def budget_statistics(metrics: Mapping[str, Metric]) -> dict[str, Callable]:
    """metric -> its budgeted statistic, for the metrics a budgeted run estimates (in table order)."""
    return {name: m.budgeted for name, m in metrics.items() if m.estimable and callable(m.budgeted)}


def not_estimable(metrics: Mapping[str, Metric]) -> tuple[str, ...]:
    """The metrics declared ``NotEstimable`` (NaN on a budgeted run)."""
    return tuple(name for name, m in metrics.items() if isinstance(m.budgeted, NotEstimable))


class Memo:
    """What is derived from a run's records (columns, draws, per-fact quantities, a budgeted run's estimates),
    computed once per run: ``get(records, key, compute)``.

    Why it exists: lm-eval calls every aggregation of a task, and then each one's standard error, each with its
    own list of the same record objects (``process_results`` logs one record per document, under every metric
    name), and ``belief-report`` asks for every metric of a task in turn; without it each call would flatten the
    records, draw the N accuracy draws or run the bootstrap again. A run's values are kept while its records are
    the same objects in the same order (checked element by element; the memo holds the records it computed for,
    so an object's identity cannot be reused), for the last ``RUNS`` record lists asked about: one run reaches it
    in more than one order (BELIEF-ICL's aggregations sort the records into the data's order, a budgeted run's
    estimates take lm-eval's). A ``compute`` may ask the memo about other records: its value is stored with the
    records it was asked for."""

    RUNS = 4

    def __init__(self) -> None:
        self._runs: list[tuple[list, dict]] = []  # (records, key -> value), most recently asked first

    def get(self, records: Sequence, key: Hashable, compute: Callable[[], Any]) -> Any:
        values = self._values_of(records)
        if key not in values:
            values[key] = compute()
        return values[key]

    def _values_of(self, records: Sequence) -> dict:
        for i, (kept, found) in enumerate(self._runs):
            if len(kept) == len(records) and all(a is b for a, b in zip(kept, records)):
                self._runs.insert(0, self._runs.pop(i))
                return found
        values: dict = {}
        self._runs.insert(0, (list(records), values))
        del self._runs[self.RUNS :]
        return values


#: the one memo of the scoring modules (``once``): the only state they keep
_RUNS = Memo()


def once(records: Sequence, key: Hashable, compute: Callable[[], Any]) -> Any:
    """``compute()`` once per run's ``records`` and ``key`` (``Memo``: lm-eval asks every metric and every
    standard error in turn, with the same record objects). Keys name their module: ``("bear", "ranks")``."""
    return _RUNS.get(records, key, compute)


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


def most_templates(records: Iterable[Mapping], correct: Callable[[Mapping], bool]) -> dict[str, bool]:
    """fact -> known when the fact is right under more than half of its templates; a template counts as
    right when any of its records (prompts: subject expressions) is ``correct``."""
    right: dict[str, dict[str, bool]] = {}
    for r in records:
        per_template = right.setdefault(r["fact_id"], {})
        per_template[r["template_id"]] = per_template.get(r["template_id"], False) or bool(correct(r))
    return {f: sum(t.values()) * 2 > len(t) for f, t in right.items()}
