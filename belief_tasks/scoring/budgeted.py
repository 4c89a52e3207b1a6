"""A budgeted run's numbers, for every family: estimates of the full-data value with their intervals.

A run with the ``budget`` knob evaluates a stratified sample of facts (``belief_tasks.budget``); its
records carry the design (``budget``, ``population`` N_r and ``drawn`` n_r of their relation). On such
records each of our aggregations returns, instead of its plain value over the drawn facts, the
design-weighted estimate of the value the full run would give (``metrics.budgeted.<family>``), with a
standard error and a 95 % interval from the Rao-Wu rescaling bootstrap (``metrics.intervals``; the
method and its measured coverage: docs/budget.md). Metrics whose full-data value a sample cannot
estimate (BELIEF's ``acc_range``, ``acc_sd``) are NaN with no standard error. On a full run's records
nothing changes.

A family's ``Estimators`` (its ``Family.budgeted`` in ``belief_tasks.families``) say how its records
become per-fact units and which statistic each metric is, as the family's ``METRICS`` declare it
(``Estimators.of``). ``budget_aware(estimators, metric, agg)`` wraps one aggregation:
``BeliefTask.aggregation`` hands lm-eval the wrapped functions, ``belief-report`` recomputes with the
same ones. Each estimated metric's interval is a metric of its own, ``<metric>_ci95``
(``interval_metric``: a ``metric_list`` entry of a budgeted task, its value [low, high] in the results
JSON). ``paired_estimates`` gives the difference of two runs on the same facts.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from belief_tasks.metrics.intervals import Design, Interval, Statistic, Units, difference, intervals, paired
from belief_tasks.scoring.common import Bound, Metric, budget_statistics, not_estimable, records_behind, with_stderr

METHOD = "bootstrap"
REPS = 500
SEED = 0


@dataclass(frozen=True)
class Estimators:
    """How a family's budgeted run is estimated: its records -> per-fact units, metric -> statistic of the
    stratum totals (``metrics.budgeted.<family>``), and the metrics a sample cannot estimate."""

    units: Callable[[list], Units]
    statistics: Mapping[str, Statistic]
    not_estimable: tuple[str, ...] = field(default=())

    @classmethod
    def of(cls, units: Callable[[list], Units], metrics: Mapping[str, Metric]) -> "Estimators":
        """A family's estimators: its units, and each metric's statistic or its being not estimable, as its
        ``METRICS`` declares them (``Metric.budgeted``)."""
        return cls(units, budget_statistics(metrics), not_estimable(metrics))


class BudgetError(ValueError):
    """Records of a budgeted run that cannot be estimated from (a drawn fact missing, mixed designs)."""


def is_budgeted(records: Sequence) -> bool:
    return bool(records) and isinstance(records[0], dict) and records[0].get("budget") is not None


def design_of(records: Sequence[dict], relations: Sequence[str]) -> Design:
    """The stratified design from the records' fields, checked: every drawn fact of every relation has
    records (``--limit`` would cut them: refused here, as ``belief-eval`` refuses it up front)."""
    population, drawn, budgets = {}, {}, set()
    for r in records:
        population.setdefault(r["relation"], int(r["population"]))
        drawn.setdefault(r["relation"], int(r["drawn"]))
        budgets.add(r.get("budget"))
    if len(budgets) != 1:
        raise BudgetError(f"records of different budgets {sorted(map(str, budgets))} cannot be estimated together")
    design, names = Design.of(relations, population)
    for h, rel in enumerate(names):
        if design.sizes[h] != drawn[rel]:
            raise BudgetError(f"relation {rel}: the records hold {int(design.sizes[h])} of the {drawn[rel]} facts the "
                              "budget drew; a budgeted run must evaluate every drawn fact (no --limit)")
    return design


_memo: dict = {"records": [], "estimators": None, "intervals": None}


def estimates(est: Estimators, records: Sequence[dict]) -> dict[str, Interval]:
    """Every budgeted statistic of ``est`` on ``records``, computed once per run's records (lm-eval asks
    each metric and each standard error in turn, with the same record objects)."""
    old = _memo["records"]
    if _memo["estimators"] is not est or len(old) != len(records) or any(a is not b for a, b in zip(old, records)):
        units = est.units(list(records))
        found = intervals(design_of(records, units.relations), units, est.statistics, METHOD, reps=REPS, seed=SEED)
        _memo.update(records=list(records), estimators=est, intervals=found)
    return _memo["intervals"]


def budget_aware(est: Estimators | None, metric: str, agg: Callable) -> Callable:
    """``agg`` as it is on a full run's records; on a budgeted run's, the estimate of the full-data value
    (NaN for a metric not estimable from a sample), with the matching ``stderr`` and an ``interval``.
    ``est`` None (a family without estimators): ``agg`` itself."""
    if est is None:
        return agg
    own_stderr = getattr(agg, "stderr", None)

    def value(items: list):
        records = records_behind(items)
        if not is_budgeted(records):
            return agg(items)
        if metric in est.not_estimable:
            return math.nan
        if metric not in est.statistics:  # refused before the model (``missing``); records read back later
            raise BudgetError(f"metric {metric} has no budgeted statistic (metrics.budgeted): it cannot be estimated")
        return estimates(est, records)[metric].estimate

    def stderr(items: list):
        records = records_behind(items)
        if not is_budgeted(records):  # a full run's exact count (MONITOR's costs) has none: NaN, printed "N/A"
            return own_stderr(items) if own_stderr is not None else math.nan
        return math.nan if metric in est.not_estimable else estimates(est, records)[metric].se

    def interval(items: list) -> Interval | None:
        records = records_behind(items)
        return estimates(est, records)[metric] if is_budgeted(records) and metric in est.statistics else None

    # every metric with an interval has a standard error: a budgeted run estimates even an exact count
    value.stderr = stderr if own_stderr is not None or metric in est.statistics else None
    value.interval = interval
    value.__name__ = value.__qualname__ = getattr(agg, "__name__", metric)
    value.__wrapped__ = agg
    return value


#: the suffix of an interval's metric name: ``acc`` -> ``acc_ci95``
INTERVAL_SUFFIX = "_ci95"


def interval_metric(est: Estimators, metric: str) -> Callable:
    """The aggregation of ``<metric>_ci95`` on a budgeted run: [low, high] of ``metric``'s 95 % interval, each a
    ``Bound`` (four decimals in the printed table, every digit in the results JSON). It reads the records
    ``metric`` reads (the doc's record, logged once) and the estimates computed for them (``estimates``).
    It has no standard error of its own (lm-eval prints "N/A")."""

    @with_stderr(None, name=metric + INTERVAL_SUFFIX)
    def interval(items: list) -> list:
        found = estimates(est, records_behind(items))[metric]
        return [Bound(found.low), Bound(found.high)]

    interval.interval_of = metric
    return interval


def missing(est: Estimators, metrics) -> list[str]:
    """The metrics that have neither a budgeted statistic nor a place among the not estimable ones."""
    return sorted(m for m in metrics if m not in est.statistics and m not in est.not_estimable)


def census_design(relations: Sequence[str]) -> Design:
    """A full run's design: every fact of every relation drawn (no sampling error)."""
    sizes: dict[str, int] = {}
    for r in relations:
        sizes[r] = sizes.get(r, 0) + 1
    return Design.of(relations, sizes)[0]


def paired_estimates(est: Estimators, records_a: Sequence[dict], records_b: Sequence[dict]) -> dict[str, Interval]:
    """Run A minus run B on the same facts, per metric: the difference of the two estimates of the
    full-data values and its paired interval (a fact's values in both runs form one unit, so what the
    runs share cancels). Two budgeted runs must share their draw (same budget, seed, data); two full
    runs give the exact difference on their facts (a zero-width interval)."""
    a, b = records_behind(records_a), records_behind(records_b)
    if is_budgeted(a) != is_budgeted(b):
        raise BudgetError("a budgeted run can be paired only with a run at the same budget")
    ua, ub = est.units(a), est.units(b)
    both = paired(ua, ub)
    if is_budgeted(a):
        design = design_of(a, ua.relations)
        if design.population.tolist() != design_of(b, ub.relations).population.tolist():
            raise BudgetError("the two runs were drawn from different populations")
    else:
        design = census_design(ua.relations)
    diffs = {m: difference(g, g) for m, g in est.statistics.items()}
    return intervals(design, both, diffs, METHOD, reps=REPS, seed=SEED)
