"""A metric on a subset of a run's facts (the trained half, the held-out half), with an interval over facts.

A checkpoint series asks whether a metric moved on the facts a model was trained on and stayed on the
others; the answer needs an interval that says how much a metric on these facts varies with the facts drawn.
Here the facts on one side are taken as a sample of facts like them: the budget's stratified bootstrap
(``metrics.intervals``, strata = relations, ``scoring.budgeted.METHOD``) with a population so large that the
finite-population correction vanishes (``LARGE`` times each relation's facts, weights kept: a budgeted run's
N_r / n_r, 1 otherwise). The estimate equals the aggregation on the subset's records (for every ratio
statistic, which the headline metrics are: tested); the interval is the usual with-replacement stratified
bootstrap interval. Its coverage was measured for budgeted draws (docs/budget.md), not for this use.

``subset_estimates``: one run; ``paired_subset_estimates``: run A minus run B on the same facts (a fact's
values in both runs form one unit, so what the runs share cancels).

Pure: numpy through ``belief_tasks.metrics``; no lm-eval.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from belief_tasks.metrics.intervals import Design, Interval, Units, difference, intervals, paired
from belief_tasks.scoring.budgeted import METHOD, REPS, SEED, Estimators, is_budgeted
from belief_tasks.scoring.common import records_behind

#: population = LARGE x the subset's facts per relation: the finite-population correction 1 - 1/LARGE
LARGE = 10**6


def _design(records: Sequence[dict], units: Units) -> Design:
    counts: dict[str, int] = {}
    for rel in units.relations:
        counts[rel] = counts.get(rel, 0) + 1
    weight = {rel: 1.0 for rel in counts}
    if is_budgeted(records):  # a budgeted run's relation weights N_r / n_r
        for r in records:
            weight[r["relation"]] = int(r["population"]) / int(r["drawn"])
    return Design.of(units.relations, {rel: round(n * weight[rel] * LARGE) for rel, n in counts.items()})[0]


def subset_estimates(est: Estimators, records: Sequence, keep: Callable[[Mapping], bool]) -> dict[str, Interval]:
    """Every budgeted statistic of ``est`` on the records ``keep`` selects, with its interval over facts."""
    chosen = [r for r in records_behind(records) if keep(r)]
    if not chosen:
        return {}
    units = est.units(chosen)
    return intervals(_design(chosen, units), units, est.statistics, METHOD, reps=REPS, seed=SEED)


def paired_subset_estimates(
    est: Estimators, records_a: Sequence, records_b: Sequence, keep: Callable[[Mapping], bool]
) -> dict[str, Interval]:
    """Run A minus run B per statistic, on the selected facts (both runs must hold the same facts)."""
    a = [r for r in records_behind(records_a) if keep(r)]
    b = [r for r in records_behind(records_b) if keep(r)]
    if not a or not b:
        return {}
    ua, ub = est.units(a), est.units(b)
    both = paired(ua, ub)
    diffs = {m: difference(g, g) for m, g in est.statistics.items()}
    return intervals(_design(a, ua), both, diffs, METHOD, reps=REPS, seed=SEED)
