"""A fast coverage study on small synthetic populations: the project's sampler and intervals, drawn
again and again, cover the full-data value about 95 % of the time (docs/budget.md has the full-size
study, ``scripts/budget_coverage.py``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from belief_tasks.facts import budget
from research import budget_coverage as C

DRAWS = 200


def _band(p: float = 0.95, n: int = DRAWS) -> tuple[float, float]:
    """Coverage within 3 binomial standard errors of 95 % over ``n`` draws."""
    se = math.sqrt(p * (1 - p) / n)
    return p - 3 * se, p + 3 * se


@pytest.fixture(scope="module")
def bear_study():
    pop = C.synthetic_bear(scale=0.1, seed=1)
    return pop, C.summarise(pop, C.simulate(pop, budgets=(0.05, 0.2), n_draws=DRAWS, reps=200))


def test_bear_intervals_cover_the_full_value(bear_study):
    pop, table = bear_study
    low, high = _band()
    for _, row in table[table["metric"].isin(["bear", "p_at_1", "p_at_5", "bear_1toN"])].iterrows():
        assert low <= row["coverage"] <= high, row.to_dict()
        assert abs(row["bias"]) < 0.5 * row["sd"], row.to_dict()  # the weighted estimator is (nearly) unbiased
        assert row["mean_se"] == pytest.approx(row["sd"], rel=0.25)  # the standard error is the spread's


def test_the_study_draws_with_the_project_sampler():
    pop = C.synthetic_bear(scale=0.05, seed=2)
    drawn = dict(C.draws(pop, (0.05, 0.2), seed=7))
    keys = {}
    for i, r in zip(pop.units.ids, pop.units.relations):
        keys.setdefault(r, []).append(i)
    for b, rows in drawn.items():
        assert {pop.units.ids[i] for i in rows} == budget.draw_keys(keys, b, 7).keys
    assert set(drawn[0.05]) < set(drawn[0.2])


def test_unweighted_means_would_be_biased_where_allocation_is_not_proportional():
    """At 5 % a relation of 8 facts is drawn at two (25 %), one of 400 at 20: the plain mean over the drawn
    facts over-weights the small relations, the design-weighted estimate does not."""
    from belief_tasks.metrics.budgeted import pooled
    from belief_tasks.metrics.intervals import Units

    rng = np.random.default_rng(0)
    relations = ["big"] * 400 + [f"small{i // 8}" for i in range(160)]
    correct = np.concatenate([rng.random(400) < 0.2, rng.random(160) < 0.9]).astype(float)
    units = Units.of([f"f{i}" for i in range(560)], relations, {"correct": correct, "one": np.ones(560)})
    pop = C.Population("two kinds of relation", "test", units, {"acc": pooled("correct", "one")})
    rows = [r for r in C.simulate(pop, budgets=(0.05,), n_draws=DRAWS, reps=100)]
    plain = [correct[drawn].mean() for seed in range(DRAWS) for _, drawn in C.draws(pop, (0.05,), seed)]
    weighted = np.array([r["estimate"] for r in rows])
    se = weighted.std() / math.sqrt(DRAWS)
    assert abs(weighted.mean() - pop.truth["acc"]) < 3 * se
    assert np.mean(plain) - pop.truth["acc"] > 0.2
    covered = np.mean([r["low"] <= pop.truth["acc"] <= r["high"] for r in rows])
    assert _band()[0] <= covered <= _band()[1]


def test_belief_intervals_cover_on_a_small_myriadlama():
    pop = C.synthetic_myriadlama(scale=0.05, seed=3, confidence_prompts=600)
    table = C.summarise(pop, C.simulate(pop, budgets=(0.2,), n_draws=DRAWS, reps=200))
    low, high = _band()
    for metric in ("acc", "consist", "ovconf", "coverage_oracle", "one_word_ratio"):
        row = table[table["metric"] == metric].iloc[0]
        assert low <= row["coverage"] <= high, row.to_dict()
    assert set(pop.not_estimable) == {"acc_range", "acc_sd"}


def test_paired_differences_cover_on_a_small_myriadlama():
    """Two synthetic models on the same facts: the paired interval of A - B covers the full-data difference,
    and is narrower than the two runs' own intervals would make it (they share the facts' difficulty)."""
    a = C.synthetic_myriadlama(scale=0.05, seed=4, confidence_prompts=600)
    b = C.synthetic_myriadlama(scale=0.05, seed=4, confidence_prompts=600, model=1, shift=0.3)
    pop = C.paired_population(a, b)
    table = C.summarise(pop, C.simulate(pop, budgets=(0.2,), n_draws=DRAWS, reps=200))
    single = C.summarise(a, C.simulate(a, budgets=(0.2,), n_draws=DRAWS, reps=200))
    low, high = _band()
    for metric in ("acc", "consist", "coverage_oracle"):
        row = table[table["metric"] == metric].iloc[0]
        assert low <= row["coverage"] <= high, row.to_dict()
        alone = single[single["metric"] == metric].iloc[0]
        assert row["half_width"] < math.sqrt(2) * alone["half_width"]
