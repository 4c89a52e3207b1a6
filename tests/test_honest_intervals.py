"""Uncertainty as labelled: a share's interval stays in [0, 1]; the card says what its ± is."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from belief_tasks.metrics import budgeted
from belief_tasks.metrics.intervals import Design, Units, bounded_interval, intervals, share, wilson


def test_wilson_is_the_score_interval_at_the_effective_sample_size():
    # se = sqrt(p (1 - p) / n) gives back Wilson's interval for n independent trials (hand formula)
    p, n, z = 0.9, 10, 1.96
    lo, hi = wilson(p, math.sqrt(p * (1 - p) / n), z)
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    assert (lo, hi) == pytest.approx((centre - half, centre + half))
    assert 0 <= lo < p < hi <= 1


@pytest.mark.parametrize("p, se", [(0.97, 0.1), (0.02, 0.3), (0.5, 2.0), (1.0, 0.0), (0.0, 0.05)])
def test_wilson_stays_inside_zero_one(p, se):
    lo, hi = wilson(p, se, stats.t.ppf(0.975, 1))
    assert 0.0 <= lo <= hi <= 1.0


def test_the_t_interval_is_kept_where_it_fits_and_replaced_where_it_leaves():
    marked = share(lambda T: T)
    assert bounded_interval(marked, 0.5, 0.1, 2.0) == pytest.approx((0.3, 0.7))  # inside: unchanged
    lo, hi = bounded_interval(marked, 0.666, 0.33, 12.7)  # t interval [-3.5, 4.9]
    assert 0.0 <= lo < 0.666 < hi <= 1.0
    unmarked = lambda T: T  # noqa: E731  (Ovconf lies in [-1, 1]: no bounds)
    assert bounded_interval(unmarked, 0.666, 0.33, 12.7) == pytest.approx((0.666 - 0.33 * 12.7, 0.666 + 0.33 * 12.7))


def test_bear_1to1_on_two_facts_stays_in_zero_one():
    """The hostile case: BEAR 1:1 estimated from 2 drawn facts of a 1:1 relation (a t interval on 1 df)."""
    ids = [f"f{i}" for i in range(2)]
    cols = {"asked0": [1, 1], "right0": [1, 0], "one_to_one": [1, 1]}
    T_cols = {c: v for c, v in cols.items()}
    stat = share(lambda T: budgeted.ratio(T["right0"].sum(-1), T["asked0"].sum(-1)))
    design = Design(np.array([0, 0]), np.array([50.0]))
    iv = intervals(design, Units.of(ids, ["P1", "P1"], T_cols), {"bear_1to1": stat}, "bootstrap", reps=200)["bear_1to1"]
    assert 0.0 <= iv.low <= iv.estimate <= iv.high <= 1.0
    assert iv.estimate - 12.7 * iv.se < 0  # the t interval would have left [0, 1]


def test_every_bear_statistic_is_marked_as_a_share():
    from belief_tasks.families import FAMILIES

    statistics = FAMILIES["bear"].budgeted.statistics
    assert len(statistics) == 16 and all(getattr(s, "bounds", None) == (0.0, 1.0) for s in statistics.values())


# ---------------------------------------------------------------- captions and the card say what ± is


def _task(name, templates=(0, 1, 2), budget=None):
    from types import SimpleNamespace

    recs = [{"template_index": t} for t in templates]
    return SimpleNamespace(name=name, budget_design=budget, has_records=True, records=lambda: recs)


def test_bear_caption_matches_the_run():
    from types import SimpleNamespace

    from belief_tasks.report.bear import stderr_note

    full, plain = SimpleNamespace(limit=None), SimpleNamespace(limit="5")
    assert stderr_note([(full, _task("belief_bear"))]) == "± is the standard error across templates (Table 3)."
    one = stderr_note([(full, _task("belief_bear", templates=(0, 0)))])
    assert one == "belief_bear: one template, so no spread across templates and no ±." and "Table 3" not in one
    budgeted = stderr_note([(full, _task("belief_bear", templates=(0,), budget={"budget": 0.05}))])
    assert (
        "a budgeted run" in budgeted and "bootstrap standard error" in budgeted and "across templates" not in budgeted
    )
    assert "--limit 5: each task scored only its first 5 documents" in stderr_note([(plain, _task("belief_bear"))])


def test_budgeted_card_says_standard_error_and_where_the_interval_is():
    from types import SimpleNamespace

    from belief_tasks.report.card import budget_lines

    design = {"facts_drawn": 2, "facts_in_population": 40, "budget": 0.05, "seed": 0}
    run = SimpleNamespace(tasks={"belief_bear": SimpleNamespace(budget_design=design)})
    text = " ".join(budget_lines(run))
    assert "± their standard error" in text and "`<metric>_ci95`" in text
    assert "with 95 % intervals" not in text


def test_a_sample_where_every_fact_agrees_gets_a_score_interval_not_zero_width():
    marked = share(lambda T: T)
    lo, hi = bounded_interval(marked, 1.0, 0.0, 2.0, sampled=16)  # 16 drawn facts, all right, facts left undrawn
    assert hi == 1.0 and lo == pytest.approx(16 / (16 + 4))  # Wilson at n = 16, p = 1: n / (n + t^2)
    assert bounded_interval(marked, 0.0, 0.0, 2.0, sampled=16) == pytest.approx((0.0, 4 / 20))
    assert bounded_interval(marked, 1.0, 0.0, 2.0, sampled=0) == (1.0, 1.0)  # every fact drawn: the exact value


def test_every_budgeted_metric_with_an_interval_has_a_standard_error():
    from belief_tasks.families import FAMILIES
    from belief_tasks.scoring.wiring import Aggregation

    for fam in FAMILIES.values():
        if fam.budgeted is None:
            continue
        for metric, declared in fam.metrics.items():
            wrapped = Aggregation(metric, declared, fam.budgeted)
            if metric in fam.budgeted.statistics:  # it gets a _ci95 on a budgeted run
                assert wrapped.has_stderr(budgeted=True), (fam.name, metric)


def test_a_budgeted_task_declares_each_interval_as_a_metric_of_its_own():
    """No hook on lm-eval's aggregation: ``<metric>_ci95`` is a ``metric_list`` entry, on budgeted runs only, for
    exactly the metrics with a budgeted statistic; its value is the [low, high] of that metric's estimate."""
    from belief_tasks.families import FAMILIES
    from belief_tasks.scoring.budgeted import estimates
    from belief_tasks.scoring.common import SameRecord
    from belief_tasks.scoring.wiring import IntervalOf, metric_list

    fam = FAMILIES["bear"]
    intervals = lambda entries: [e for e in entries if isinstance(e["aggregation"], IntervalOf)]  # noqa: E731
    assert intervals(metric_list("bear", fam.metrics, fam.budgeted, False)) == []
    entries = metric_list("bear", fam.metrics, fam.budgeted, True)
    added = intervals(entries)
    assert [e["metric"] for e in entries] == [*fam.metrics, *(e["metric"] for e in added)]  # after the metrics
    assert [e["metric"] for e in added] == [f"{m}_ci95" for m in fam.metrics if m in fam.budgeted.statistics]
    assert intervals(metric_list("belief_mlm", fam.metrics, None, True)) == []  # a family without estimators: none
    from test_budget_report import bear_records

    records = bear_records(100, {"P1": 8, "P2": 2}, 0.6)
    first = added[0]
    metric = first["metric"].removesuffix("_ci95")
    low, high = first["aggregation"]([SameRecord(r, metric) for r in records])
    found = estimates(fam.budgeted, records)[metric]
    assert (low, high) == (found.low, found.high) and low <= found.estimate <= high
