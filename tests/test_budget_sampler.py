"""The ``budget`` knob's sampler: stratified by relation, seeded, nested, model-free, and requests of a
drawn fact that do not depend on which other facts are drawn (so a larger budget reuses the cache)."""

from __future__ import annotations

import math

import pytest

from belief_tasks.data import load_facts
from belief_tasks.facts import budget
from belief_tasks.options import KnobError, Options, parse_options
from belief_tasks.tasks.base import check_budget, check_metadata, select_facts

SAMPLE = {"source": "sample"}
BUDGETS = (0.01, 0.05, 0.2, 0.5, 1.0)


def _opts(**md):
    return parse_options(Options, {**SAMPLE, **md})


def test_allocation_rounds_up_keeps_two_and_grows_with_the_budget():
    assert budget.allocation(0.05, 100) == 5  # not 6 from 0.05 * 100 = 5.000000000000001
    assert budget.allocation(0.051, 100) == 6
    assert budget.allocation(0.01, 50) == 2  # at least two per relation
    assert budget.allocation(0.5, 1) == 1  # never more than the relation has
    assert budget.allocation(1.0, 37) == 37
    for n in (1, 2, 7, 56, 613, 24_643):
        sizes = [budget.allocation(b / 1000, n) for b in range(1, 1001)]
        assert sizes == sorted(sizes) and sizes[-1] == n
    with pytest.raises(ValueError):
        budget.allocation(0.0, 10)


def test_draw_is_stratified_with_exact_counts_per_relation():
    fs = load_facts("myriadlama", SAMPLE)
    for b in BUDGETS:
        sel = select_facts(fs, _opts(budget=b))
        per = {}
        for f in sel:
            per[f.relation] = per.get(f.relation, 0) + 1
        for rid in fs.relations:
            n_pop = len(fs.facts_of(rid))
            assert per[rid] == budget.allocation(b, n_pop) == sel.draw.drawn[rid]
            assert sel.draw.population[rid] == n_pop
        assert [f.id for f in sel] == [f.id for f in fs.facts if f.id in {g.id for g in sel}]  # data order kept


def test_budgets_are_nested_and_seeded():
    fs = load_facts("myriadlama", SAMPLE)
    drawn = [{f.id for f in select_facts(fs, _opts(budget=b, seed=7))} for b in BUDGETS]
    for small, large in zip(drawn, drawn[1:]):
        assert small < large
    assert drawn[-1] == {f.id for f in fs.facts}
    again = {f.id for f in select_facts(fs, _opts(budget=0.2, seed=7))}
    other = {f.id for f in select_facts(fs, _opts(budget=0.2, seed=8))}
    assert again == drawn[2] and other != drawn[2]


def test_draw_depends_on_keys_and_seed_only():
    """Not on the order of the data, not on the other relations run, not on the model."""
    keys = {"P1": [f"f{i}" for i in range(300)], "P2": [f"g{i}" for i in range(40)]}
    a = budget.draw_keys(keys, 0.1, 3)
    b = budget.draw_keys({"P2": keys["P2"][::-1], "P1": keys["P1"][::-1]}, 0.1, 3)
    c = budget.draw_keys({"P1": keys["P1"]}, 0.1, 3)
    assert a.keys == b.keys
    assert {k for k in a.keys if k.startswith("f")} == c.keys
    assert (a.drawn["P1"], a.drawn["P2"]) == (30, 4)
    # the sampler's whole input: a rank value from (seed, key), the lowest first
    firsts = sorted(keys["P1"], key=lambda k: budget.rank_value(3, k))[:30]
    assert set(firsts) == c.keys
    fs = load_facts("myriadlama", SAMPLE)
    with_model = parse_options(Options, {**SAMPLE, "budget": 0.1, "pretrained": "some/other-model"})
    assert [f.id for f in select_facts(fs, with_model)] == [f.id for f in select_facts(fs, _opts(budget=0.1))]


def test_each_relation_gets_its_share_on_average():
    """Over seeds, every fact of a relation is drawn with probability n_r / N_r (simple random sampling)."""
    keys = {"P1": [f"k{i}" for i in range(20)]}
    counts = dict.fromkeys(keys["P1"], 0)
    seeds = 2000
    for seed in range(seeds):
        for k in budget.draw_keys(keys, 0.25, seed).keys:
            counts[k] += 1
    p = 5 / 20
    sd = math.sqrt(p * (1 - p) / seeds)
    assert all(abs(c / seeds - p) < 4.5 * sd for c in counts.values()), counts


def test_budget_knob_is_validated():
    for bad in (0, -0.1, 1.5, "abc", True):
        with pytest.raises(KnobError, match="budget"):
            _opts(budget=bad)
    assert _opts(budget="0.05").budget == 0.05 and _opts(budget=1).budget == 1.0
    assert _opts(budget=None).budget is None
    with pytest.raises(KnobError, match="max_facts_per_relation"):
        check_budget(_opts(budget=0.1, max_facts_per_relation=3))
    with pytest.raises(KnobError, match="max_facts_per_relation"):
        check_metadata({**SAMPLE, "budget": 0.1, "max_facts_per_relation": 3}, Options)


def test_no_budget_keeps_the_selection_as_it_was():
    fs = load_facts("myriadlama", SAMPLE)
    sel = select_facts(fs, _opts(max_facts_per_relation=3))
    assert sel.draw is None and sel.population is sel and sel.design(sel[0]) == {}
    assert len(sel) == 3 * len(fs.relations)


def test_budget_is_refused_where_a_family_has_no_budgeted_estimators():
    with pytest.raises(KnobError, match="belief_mlm"):
        check_budget(_opts(budget=0.1), "belief_mlm")
    for family in ("belief_icl", "bear", "iclke", "monitor"):
        check_budget(_opts(budget=0.1), family)
    check_budget(_opts(), "belief_mlm")
    check_budget(_opts(budget="none"), "belief_mlm")  # an unset value sets no budget


def test_budget_rules_live_in_one_function():
    """``check_budget`` holds every rule of the knob beyond its value: the cap, the family, ``--limit``
    (``belief-eval``'s check of the built tasks calls it), each with its own message."""
    with pytest.raises(KnobError, match="task belief_bear: a budget cannot be combined with --limit 3"):
        check_budget(_opts(budget=0.1), "bear", limit=3, task="belief_bear")
    check_budget(_opts(), "bear", limit=3, task="belief_bear")  # no budget: --limit is the user's to set
    check_budget(_opts(budget=0.1), "bear", limit=None, task="belief_bear")


def test_every_metric_of_a_budgeted_family_has_an_estimator_or_is_marked():
    from belief_tasks.families import FAMILIES
    from belief_tasks.scoring.budgeted import missing

    budgeted = [f for f in FAMILIES.values() if f.budgeted is not None]
    assert {f.name for f in budgeted} == {"belief_icl", "bear", "iclke", "monitor"}
    for family in budgeted:
        est = family.budgeted
        assert set(family.metrics) == set(est.statistics) | set(est.not_estimable), family.name
        assert missing(est, family.metrics) == []
    # the estimators are the declarations: each statistic is the object the metric's Metric holds
    for family in budgeted:
        assert all(family.budgeted.statistics[m] is d.budgeted for m, d in family.metrics.items() if d.estimable)
    # a metric declared without its statistic (None) in a budgeted family: a budget is refused (before the model)
    from belief_tasks.scoring.budgeted import Estimators
    from belief_tasks.scoring.common import Metric

    bear = FAMILIES["bear"]
    metrics = {
        **bear.metrics,
        "top_two": Metric(bear.metrics["p_at_1"].aggregation, bear.metrics["p_at_1"].stderr, True, None),
    }
    assert missing(Estimators.of(bear.budgeted.units, metrics), metrics) == ["top_two"]


def test_belief_eval_refuses_bad_budgets_before_the_model():
    import json

    from harness import run_cli

    base = ["--model", "dummy", "--tasks", "belief_bear", "--output_path", "/nonexistent/never-written"]
    cases = [
        ({"source": "sample", "budget": 0.05}, ["--limit", "3"], "--limit 3"),
        ({"source": "sample", "budget": 1.5}, [], "a fraction in (0, 1]"),
        ({"source": "sample", "budget": 0.05, "max_facts_per_relation": 2}, [], "max_facts_per_relation"),
    ]
    for metadata, extra, says in cases:
        done = run_cli([*base, "--metadata", json.dumps(metadata), *extra], timeout=300)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "stopped before loading the model" in done.stderr and says in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr


def test_facts_with_one_sampling_key_are_drawn_together_and_budgets_stay_nested():
    """A key built from labels can repeat (namesakes): such facts share a rank, so they are drawn
    together unless the cut falls between them, and the draw is still nested."""
    keys = {"P1": [f"k{i // 2}" for i in range(40)]}  # 20 keys, each twice
    rows = [budget.drawn_rows(keys, b, 5)[0]["P1"] for b in (0.1, 0.2, 0.5)]
    assert [len(r) for r in rows] == [4, 8, 20]
    for small, large in zip(rows, rows[1:]):
        assert set(small) <= set(large)
    assert all(i ^ 1 in rows[1] for i in rows[1])  # 8 rows of 4 whole pairs of namesakes
