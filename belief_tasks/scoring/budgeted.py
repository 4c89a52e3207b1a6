"""A budgeted run's numbers, for every family: estimates of the full-data value with their intervals.

A run with the ``budget`` knob evaluates a stratified sample of facts (``belief_tasks.facts.budget``); its
records carry the design (``budget``, ``population`` N_r and ``drawn`` n_r of their relation). On such
records each of our aggregations returns, instead of its plain value over the drawn facts, the
design-weighted estimate of the value the full run would give (``metrics.budgeted.<family>``), with a
standard error and a 95 % interval from the Rao-Wu rescaling bootstrap (``metrics.intervals``; the
method and its measured coverage: docs/budget.md). Metrics whose full-data value a sample cannot
estimate (BELIEF's ``acc_range``, ``acc_sd``) are NaN with no standard error. On a full run's records
nothing changes.

A family's ``Estimators`` (its ``Family.budgeted`` in ``belief_tasks.families``) say how its records
become per-fact units and which statistic each metric is, as the family's ``METRICS`` declare it
(``Estimators.of``). ``estimates(est, records)`` computes every statistic once per run's records;
``scoring.wiring`` turns each metric into what lm-eval calls (``Aggregation``: the plain value on a full run's
records, the estimate on a budgeted run's) and each estimated metric's interval into a metric of its own,
``<metric>_ci95`` (its value [low, high] in the results JSON); ``belief-report`` recomputes with the same
objects. ``paired_estimates`` gives the difference of two runs on the same facts.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from belief_tasks.metrics.intervals import Design, Interval, StatisticFn, Units, difference, intervals, paired
from belief_tasks.scoring.common import Metric, budget_statistics, not_estimable, once, records_behind

METHOD = "bootstrap"
REPS = 500
SEED = 0


@dataclass(frozen=True, eq=False)
class Estimators:
    """How a family's budgeted run is estimated: its records -> per-fact units, metric -> statistic of the
    stratum totals (``metrics.budgeted.<family>``), and the metrics a sample cannot estimate. Compared and
    hashed by identity: the memo of a run's estimates is keyed by the estimators (``estimates``)."""

    units: Callable[[list], Units]
    statistics: Mapping[str, StatisticFn]
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
    population: dict[str, int] = {}
    drawn: dict[str, int] = {}
    budgets = set()
    for r in records:
        population.setdefault(r["relation"], int(r["population"]))
        drawn.setdefault(r["relation"], int(r["drawn"]))
        budgets.add(r.get("budget"))
    if len(budgets) != 1:
        raise BudgetError(f"records of different budgets {sorted(map(str, budgets))} cannot be estimated together")
    design, names = Design.of(relations, population)
    for h, rel in enumerate(names):
        if design.sizes[h] != drawn[rel]:
            raise BudgetError(
                f"relation {rel}: the records hold {int(design.sizes[h])} of the {drawn[rel]} facts the "
                "budget drew; a budgeted run must evaluate every drawn fact (no --limit)"
            )
    return design


def estimates(est: Estimators, records: Sequence[dict]) -> dict[str, Interval]:
    """Every budgeted statistic of ``est`` on ``records``, computed once per run's records (``scoring.common.once``:
    lm-eval asks each metric and each standard error in turn, with the same record objects)."""

    def compute() -> dict[str, Interval]:
        units = est.units(list(records))
        return intervals(design_of(records, units.relations), units, est.statistics, METHOD, reps=REPS, seed=SEED)

    return once(records, ("budgeted", "estimates", est), compute)


def estimate(est: Estimators, metric: str, records: Sequence[dict]) -> float:
    """A budgeted run's estimate of ``metric``'s full-data value (NaN for a metric not estimable from a sample)."""
    if metric in est.not_estimable:
        return math.nan
    if metric not in est.statistics:  # refused before the model (``missing``); records read back later
        raise BudgetError(f"metric {metric} has no budgeted statistic (metrics.budgeted): it cannot be estimated")
    return estimates(est, records)[metric].estimate


def estimate_stderr(est: Estimators, metric: str, records: Sequence[dict]) -> float:
    """The standard error of ``estimate`` (NaN for a metric not estimable from a sample)."""
    return math.nan if metric in est.not_estimable else estimates(est, records)[metric].se


#: the suffix of an interval's metric name: ``acc`` -> ``acc_ci95``
INTERVAL_SUFFIX = "_ci95"


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
