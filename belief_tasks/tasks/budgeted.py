"""A budgeted run's numbers, for every family: estimates of the full-data value with their intervals.

A run with the ``budget`` knob evaluates a stratified sample of facts (``belief_tasks.budget``); its
records carry the design (``budget``, ``population`` N_r and ``drawn`` n_r of their relation). On such
records each of our aggregations returns, instead of its plain value over the drawn facts, the
design-weighted estimate of the value the full run would give (``metrics.budgeted.<family>``), with a
standard error and a 95 % interval from the Rao-Wu rescaling bootstrap (``metrics.intervals``; the
method and its measured coverage: docs/budget.md). Metrics whose full-data value a sample cannot
estimate (BELIEF's ``acc_range``, ``acc_sd``) are NaN with no standard error. On a full run's records
nothing changes.

``budget_aware(family, metric, agg)`` wraps one aggregation: ``BeliefTask.aggregation`` hands lm-eval
the wrapped functions, ``belief-report`` recomputes with the same ones, and the harness writes each
interval into the results JSON as ``<metric>_ci95`` (``belief_tasks.harness``).
"""

from __future__ import annotations

import math
from importlib import import_module
from typing import Callable, Sequence

from belief_tasks.metrics.intervals import Design, Interval, difference, intervals, paired

METHOD = "bootstrap"
REPS = 500
SEED = 0
#: family -> module of its budgeted statistics (``metrics.budgeted.<name>``)
STATISTICS = {"belief_icl": "belief", "bear": "bear", "iclke": "iclke", "monitor": "monitor"}


class BudgetError(ValueError):
    """Records of a budgeted run that cannot be estimated from (a drawn fact missing, mixed designs)."""


def unwrap(items: Sequence) -> list:
    """The records behind an aggregation's items (a reference to a record logged under another metric
    name is resolved)."""
    return [getattr(x, "record", x) for x in items]


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


def family_estimators(family: str):
    """(records -> per-fact units, metric -> statistic, metrics not estimable) of ``family``; None when the
    family has no budgeted statistics."""
    from belief_tasks.tasks import FAMILIES

    if family not in STATISTICS:
        return None
    stats = import_module(f"belief_tasks.metrics.budgeted.{STATISTICS[family]}")
    return import_module(FAMILIES[family]).budget_units, stats.STATISTICS, getattr(stats, "NOT_ESTIMABLE", ())


_memo: dict = {"records": [], "family": None, "intervals": None}


def estimates(family: str, records: Sequence[dict]) -> dict[str, Interval]:
    """Every budgeted statistic of ``family`` on ``records``, computed once per run's records (lm-eval asks
    each metric and each standard error in turn, with the same record objects)."""
    old = _memo["records"]
    if _memo["family"] != family or len(old) != len(records) or any(a is not b for a, b in zip(old, records)):
        units_of, stats, _ = family_estimators(family)
        units = units_of(list(records))
        _memo.update(records=list(records), family=family,
                     intervals=intervals(design_of(records, units.relations), units, stats, METHOD, reps=REPS, seed=SEED))
    return _memo["intervals"]


def budget_aware(family: str, metric: str, agg: Callable) -> Callable:
    """``agg`` as it is on a full run's records; on a budgeted run's, the estimate of the full-data value
    (NaN for a metric not estimable from a sample), with the matching ``stderr`` and an ``interval``."""
    found = family_estimators(family)
    if found is None:
        return agg
    _, stats, not_estimable = found
    if metric not in stats and metric not in not_estimable:
        raise KeyError(f"{family}: metric {metric} has no budgeted statistic and is not marked not estimable")
    own_stderr = getattr(agg, "stderr", None)

    def value(items: list):
        records = unwrap(items)
        if not is_budgeted(records):
            return agg(items)
        return math.nan if metric in not_estimable else estimates(family, records)[metric].estimate

    def stderr(items: list):
        records = unwrap(items)
        if not is_budgeted(records):
            return own_stderr(items)
        return estimates(family, records)[metric].se

    def interval(items: list) -> Interval | None:
        records = unwrap(items)
        return estimates(family, records)[metric] if is_budgeted(records) and metric in stats else None

    value.stderr = stderr if own_stderr is not None else None
    value.interval = interval
    value.__name__ = value.__qualname__ = getattr(agg, "__name__", metric)
    value.__wrapped__ = agg
    return value


def census_design(records: Sequence[dict], relations: Sequence[str]) -> Design:
    """A full run's design: every fact of every relation drawn (no sampling error)."""
    sizes: dict[str, int] = {}
    for r in relations:
        sizes[r] = sizes.get(r, 0) + 1
    return Design.of(relations, sizes)[0]


def paired_estimates(family: str, records_a: Sequence[dict], records_b: Sequence[dict]) -> dict[str, Interval]:
    """Run A minus run B on the same facts, per metric: the difference of the two estimates of the
    full-data values and its paired interval (a fact's values in both runs form one unit, so what the
    runs share cancels). Two budgeted runs must share their draw (same budget, seed, data); two full
    runs give the exact difference on their facts (a zero-width interval)."""
    units_of, stats, _ = family_estimators(family)
    a, b = unwrap(records_a), unwrap(records_b)
    if is_budgeted(a) != is_budgeted(b):
        raise BudgetError("a budgeted run can be paired only with a run at the same budget")
    ua, ub = units_of(a), units_of(b)
    both = paired(ua, ub)
    if is_budgeted(a):
        design = design_of(a, ua.relations)
        other = design_of(b, ub.relations)
        if design.population.tolist() != other.population.tolist():
            raise BudgetError("the two runs were drawn from different populations")
    else:
        design = census_design(a, ua.relations)
    diffs = {m: difference(g, g) for m, g in stats.items()}
    return intervals(design, both, diffs, METHOD, reps=REPS, seed=SEED)
