"""Budgeted estimates and intervals: hand-checkable cases, exact design properties by enumeration, and
every family's statistics equal to the family's metric when every fact is drawn."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from belief_tasks.families import FAMILIES
from belief_tasks.metrics import bear as MB
from belief_tasks.metrics import belief as MBel
from belief_tasks.metrics import iclke as MI
from belief_tasks.metrics import monitor as MM
from belief_tasks.metrics.budgeted import bear as BB
from belief_tasks.metrics.budgeted import belief as BBel
from belief_tasks.metrics.budgeted import iclke as BI
from belief_tasks.metrics.budgeted import monitor as BM
from belief_tasks.metrics.budgeted import pooled, relation_mean
from belief_tasks.metrics.intervals import (
    Design,
    Totals,
    Units,
    difference,
    estimate,
    interval,
    intervals,
    jackknife_se,
    paired,
    t_quantile,
    totals,
)

#: each family's statistics (metric -> statistic), as its ``METRICS`` declare them, in table order
BB_STATS, BBEL_STATS, BI_STATS, BM_STATS = (
    FAMILIES[f].budgeted.statistics for f in ("bear", "belief_icl", "iclke", "monitor")
)

MEAN = pooled("y", "one")


def _units(strata: list[str], y: list[float], ids=None) -> Units:
    ids = ids or [f"f{i}" for i in range(len(y))]
    return Units.of(ids, strata, {"y": y, "one": [1.0] * len(y)})


# --------------------------------------------------------------------------- by hand


def test_stratified_mean_and_its_jackknife_standard_error_by_hand():
    """Relation a: 10 facts, 3 drawn (1, 0, 1); relation b: 6 facts, 2 drawn (2, 4).
    Estimate (10 * 2/3 + 6 * 3) / 16 = 1.541667. Variance of the estimated total
    sum_h N_h^2 (1 - f_h) s_h^2 / n_h = 100 * 0.7 * (1/3) / 3 + 36 * (2/3) * 2 / 2 = 7.7778 + 24 = 31.7778;
    of the mean / 16^2: SE = sqrt(31.7778) / 16 = 0.352324."""
    strata = ["a", "a", "a", "b", "b"]
    design, _ = Design.of(strata, {"a": 10, "b": 6})
    units = _units(strata, [1, 0, 1, 2, 4])
    assert estimate(design, units, MEAN) == pytest.approx((10 * 2 / 3 + 6 * 3) / 16)
    se = math.sqrt(100 * 0.7 * (1 / 3) / 3 + 36 * (2 / 3) * 2 / 2) / 16
    assert jackknife_se(design, units, {"m": MEAN})["m"] == pytest.approx(se, rel=1e-12)
    boot = interval(design, units, MEAN, "bootstrap", reps=40_000, seed=1)
    assert boot.se == pytest.approx(se, rel=0.02)
    assert design.df == 3  # (3 - 1) + (2 - 1)
    jk = interval(design, units, MEAN, "jackknife")
    assert (jk.high - jk.low) / 2 == pytest.approx(t_quantile(3) * se) and t_quantile(3) == pytest.approx(
        3.182446, 1e-5
    )


def test_every_fact_drawn_gives_the_full_value_and_no_spread():
    strata = ["a", "a", "b", "b", "b"]
    design, _ = Design.of(strata, {"a": 2, "b": 3})
    units = _units(strata, [1, 0, 1, 1, 0])
    for method in ("jackknife", "bootstrap"):
        iv = interval(design, units, MEAN, method)
        assert iv.estimate == pytest.approx(0.6) and iv.se == pytest.approx(0.0, abs=1e-12)
        assert iv.low == pytest.approx(iv.high)


def test_a_single_drawn_fact_of_a_larger_relation_has_no_standard_error():
    design, _ = Design.of(["a", "b", "b"], {"a": 5, "b": 2})
    assert math.isnan(jackknife_se(design, _units(["a", "b", "b"], [1, 0, 1]), {"m": MEAN})["m"])


def test_design_is_unbiased_and_the_jackknife_variance_is_exact_on_average():
    """All 6 x 3 = 18 samples of a 2-relation population (4 facts, 2 drawn; 3 facts, 2 drawn): the mean
    estimate is the full value and the mean jackknife variance equals the estimator's variance, although
    relation b is sampled at 2/3 and relation a at 1/2 (weights N_h / n_h)."""
    pop = {"a": [0.0, 1.0, 1.0, 3.0], "b": [2.0, 5.0, 11.0]}
    truth = (sum(pop["a"]) + sum(pop["b"])) / 7
    estimates, variances = [], []
    for sa in itertools.combinations(pop["a"], 2):
        for sb in itertools.combinations(pop["b"], 2):
            strata = ["a", "a", "b", "b"]
            design, _ = Design.of(strata, {"a": 4, "b": 3})
            units = _units(strata, [*sa, *sb])
            estimates.append(estimate(design, units, MEAN))
            variances.append(jackknife_se(design, units, {"m": MEAN})["m"] ** 2)
    assert np.mean(estimates) == pytest.approx(truth, rel=1e-12)
    assert np.mean(variances) == pytest.approx(np.var(estimates), rel=1e-12)


def test_a_ratio_has_the_linearisation_standard_error():
    """A pooled share with facts of different weight (prompts per fact): the jackknife agrees with the
    textbook linearisation sqrt(sum_h N_h^2 (1 - f_h) s_h^2(z) / n_h) / X, z = y - R x."""
    rng = np.random.default_rng(0)
    strata = ["a"] * 60 + ["b"] * 40
    x = rng.integers(1, 7, 100).astype(float)
    y = rng.binomial(x.astype(int), 0.4).astype(float)
    units = Units.of([f"f{i}" for i in range(100)], strata, {"y": y, "x": x})
    design, _ = Design.of(strata, {"a": 600, "b": 100})
    ratio = pooled("y", "x")
    R = estimate(design, units, ratio)
    z = y - R * x
    var, X = 0.0, 0.0
    for h, N in (("a", 600), ("b", 100)):
        m = np.array(strata) == h
        var += N**2 * (1 - m.sum() / N) * z[m].var(ddof=1) / m.sum()
        X += N * x[m].mean()
    assert jackknife_se(design, units, {"r": ratio})["r"] == pytest.approx(math.sqrt(var) / X, rel=0.02)


def test_paired_difference_is_the_interval_of_per_fact_differences():
    """Two runs on the same facts: for a linear metric the SE of A - B is that of the per-fact differences."""
    strata = ["a"] * 4 + ["b"] * 3
    ids = [f"f{i}" for i in range(7)]
    ya, yb = [1, 0, 1, 1, 0, 1, 1], [0, 0, 1, 0, 0, 1, 0]
    a, b = _units(strata, ya, ids), _units(strata, yb, ids)
    b_shuffled = b.take(np.array([6, 5, 4, 3, 2, 1, 0]))  # order does not matter: facts are matched by id
    design, _ = Design.of(strata, {"a": 40, "b": 9})
    diff = intervals(design, paired(a, b_shuffled), {"d": difference(MEAN, MEAN)}, "jackknife")["d"]
    direct = interval(design, _units(strata, list(np.subtract(ya, yb)), ids), MEAN, "jackknife")
    assert diff.estimate == pytest.approx(direct.estimate) and diff.se == pytest.approx(direct.se)
    with pytest.raises(ValueError, match="same facts"):
        paired(a, _units(strata, yb, [f"g{i}" for i in range(7)]))


def test_relation_mean_weights_relations_equally():
    strata = ["a", "a", "b", "b"]
    design, _ = Design.of(strata, {"a": 100, "b": 2})
    assert estimate(design, _units(strata, [1, 1, 0, 0]), relation_mean("y", "one")) == pytest.approx(0.5)
    assert estimate(design, _units(strata, [1, 1, 0, 0]), MEAN) == pytest.approx(100 / 102)


# --------------------------------------------------------------------------- the full run's values


def _census(units: Units, stats) -> dict[str, float]:
    sizes = {r: units.relations.count(r) for r in dict.fromkeys(units.relations)}
    design, _ = Design.of(units.relations, sizes)
    T = Totals(totals(design, units.values), units.columns)
    return {m: float(g(T)) for m, g in stats.items()}


def test_belief_statistics_equal_the_metrics_on_the_full_run():
    rng = np.random.default_rng(3)
    fact_ids, relations, templates, correct, answers = [], [], [], [], []
    words = ["Paris", "Rome", "New York", "", "Berlin", "paris"]
    for p in range(60):
        rel = f"P{p % 4}"
        n_t = 3 + p % 4 % 2  # relations with 3 or 4 templates
        for t in range(n_t):
            for _s in range(1 + p % 3):
                fact_ids.append(f"f{p}")
                relations.append(rel)
                templates.append(f"{rel}t{t}")
                answers.append(words[rng.integers(len(words))])
                correct.append(bool(rng.random() < 0.4))
    sampled = {f"f{p}": (rng.random(), bool(rng.random() < 0.5)) for p in range(0, 60, 3)}
    got = _census(BBel.units(fact_ids, relations, templates, correct, answers, sampled), BBEL_STATS)
    cov = MBel.knowledge_coverage(fact_ids, relations, templates, correct)
    conf, ok = zip(*sampled.values())
    want = {
        "acc": MBel.expected_accuracy(fact_ids, relations, templates, correct),
        "consist": MBel.consistency(fact_ids, answers),
        "ovconf": MBel.overconfidence(conf, ok),
        "one_word_ratio": MBel.one_word_ratio(answers),
        "empty_answer_rate": MBel.empty_answer_rate(answers),
        "coverage_average": cov["average"],
        "coverage_maximum": cov["maximum"],
        "coverage_oracle": cov["oracle"],
    }
    assert got == pytest.approx(want, rel=1e-12)


def test_bear_statistics_equal_the_metrics_on_the_full_run():
    rng = np.random.default_rng(4)
    facts, relations, tpl, ranks, one = [], [], [], [], []
    for i in range(80):
        rel = f"P{i % 5}"
        for t in range(3 + (i % 5 == 0)):  # one relation has a 4th template
            facts.append(f"f{i}"), relations.append(rel), tpl.append(t), one.append(i % 5 < 2)
            ranks.append(int(rng.integers(0, 12)) if rng.random() < 0.6 else 0)
    got = _census(BB.units(facts, relations, tpl, ranks, one), BB_STATS)
    assert all(math.isnan(got.pop(m)) for m in [*BB_STATS][9:])  # the confidence metrics need their terms
    sub = [k for k, o in enumerate(one) if o]
    want = {
        "bear": MB.bear_score(ranks, tpl),
        "bear_1to1": MB.bear_score([ranks[k] for k in sub], [tpl[k] for k in sub]),
        **{f"bear_t{t}": MB.template_scores(ranks, tpl)[t] for t in range(3)},
        **{f"p_at_{k}": MB.top_k_share(ranks, k) for k in (1, 5, 10)},
    }
    rest = [k for k, o in enumerate(one) if not o]
    want["bear_1toN"] = MB.bear_score([ranks[k] for k in rest], [tpl[k] for k in rest])
    assert got == pytest.approx(want, rel=1e-12)


def test_iclke_statistics_equal_the_metrics_on_the_full_run():
    rng = np.random.default_rng(5)
    lps = [list(rng.normal(0, 2, 6)) for _ in range(90)]
    lps[3] = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # a tie counts as wrong
    gold = [int(rng.integers(0, 6)) for _ in lps]
    rels = [f"P{i % 7}" for i in range(len(lps))]
    got = _census(BI.units([f"f{i}" for i in range(len(lps))], lps, gold, rels), BI_STATS)
    want = {
        "acc": MI.accuracy(lps, gold),
        "acc_macro": MI.macro_accuracy(lps, gold, rels),
        "gold_prob": float(np.mean(MI.gold_confidences(lps, gold))),
        **{f"acc@{k}": MI.accuracy_at_confidence(lps, gold, k) for k in MI.THRESHOLDS},
    }
    assert got == pytest.approx(want, rel=1e-12, nan_ok=True)


def test_monitor_statistics_equal_the_metrics_on_the_full_run():
    rng = np.random.default_rng(6)
    rels, quantities, correct, positive, scored = [], [], [], [], []
    for i in range(70):
        rel = f"P{i % 4}"
        n_units = 1 + i % 3
        primary = rng.random(n_units)
        frames = [rng.random(n_units) for _ in range(6 if rel == "P3" else 7)]
        negatives = [rng.random(n_units) for _ in range(5)]
        rels.append(rel), quantities.append(MM.fact_quantities(primary, frames, negatives))
        correct.append([int(rng.random() < 0.5) for _ in frames]), positive.append(int(rng.random() < 0.6))
        scored.append(bool(positive[-1]))
    alpha = (0.5, 0.3, 0.2)
    got = _census(
        BM.units([f"f{i}" for i in range(70)], rels, quantities, correct, positive, scored, alpha, 7), BM_STATS
    )
    assert all(math.isnan(got.pop(m)) for m in [*BM_STATS][19:])  # the R x M accuracies and costs need their columns
    keep = [k for k, s in enumerate(scored) if s]
    pick = lambda key: [quantities[k][key] for k in keep]  # noqa: E731
    want = {
        "monitor": MM.monitor_over_relations(
            [rels[k] for k in keep], pick("pfd"), pick("ird"), pick("primary_prob"), alpha
        ),
        **{key: MM.mean_over_relations([rels[k] for k in keep], pick(key)) for key in BM.ANCHOR_MEANS},
        **{f"acc_{w}": MM.accuracy_over_relations(rels, correct, w) for w in ("avg", "max", "min")},
        "acc_positive": MM.mean_over_relations(rels, positive),
        **{f"acc_relation_{w}": MM.accuracy_across_relations(rels, correct, w) for w in ("max", "min")},
        **{f"acc_frame_{j}": MM.frame_accuracy_over_relations(rels, correct, j) for j in range(7)},
    }
    assert got == pytest.approx(want, rel=1e-12)


def test_a_selecting_statistic_is_bias_corrected_and_its_standard_error_covers_the_correction():
    """A maximum over estimates (the best of two equal templates): the plug-in is biased upwards, the
    bootstrap estimate is 2 g(T^) - mean of the replicates, and its standard error is that of the
    corrected estimate (larger than the plain replicates' SD)."""
    from belief_tasks.metrics.intervals import bootstrap_totals, selecting

    @selecting
    def best(T):
        return T.block("t").max(-1).sum(-1) / T["one"].sum(-1)

    rng = np.random.default_rng(0)
    strata = ["a"] * 30 + ["b"] * 30
    ids = [f"f{i}" for i in range(60)]
    units = Units.of(ids, strata, {"one": np.ones(60), "t0": rng.random(60) < 0.5, "t1": rng.random(60) < 0.5})
    design, _ = Design.of(strata, {"a": 300, "b": 300})
    plain = estimate(design, units, best)
    iv = intervals(design, units, {"best": best}, "bootstrap", reps=400, seed=3)["best"]
    reps = best(Totals(bootstrap_totals(design, units, 400, 3), units.columns))
    assert iv.estimate == pytest.approx(2 * plain - reps.mean())
    assert iv.estimate < plain  # the correction lowers a maximum
    assert iv.se > reps.std(ddof=1)
    unmarked = intervals(design, units, {"best": lambda T: best(T)}, "bootstrap", reps=400, seed=3)["best"]
    assert unmarked.estimate == pytest.approx(plain) and unmarked.se == pytest.approx(reps.std(ddof=1))


def test_monitor_paper_accuracies_and_costs_equal_the_metrics_on_the_full_run():
    """Section 4.3's R x M accuracies (6 frames in P2) and the request / token totals, every fact drawn."""
    rng = np.random.default_rng(7)
    rels, quantities, correct, grids = [], [], [], []
    costs = {name: [] for name in BM.COSTS}
    for i in range(45):
        rel = f"P{i % 3}"
        frames = 6 if rel == "P2" else 7
        rels.append(rel), quantities.append(MM.fact_quantities([0.5], [[0.4]] * frames, [[0.3]] * 5))
        correct.append([int(rng.random() < 0.5) for _ in range(frames)])
        grids.append((rng.random((frames, 5)) < 0.3 + 0.1 * (i % 3)).astype(int).tolist())
        for name in BM.COSTS:
            costs[name].append(int(rng.integers(5, 400)))
    args = ([f"f{i}" for i in range(45)], rels, quantities, correct, [1] * 45, [True] * 45, MM.DEFAULT_ALPHA, 7)
    names = [m for m in BM_STATS if m.startswith(("acc_paper_", "cost_"))]
    got = _census(BM.units(*args, grids, costs), {m: BM_STATS[m] for m in names})
    want = {
        **{f"acc_paper_{w}": MM.accuracy_over_relations(rels, grids, w) for w in ("avg", "max", "min")},
        **{f"acc_paper_relation_{w}": MM.accuracy_across_relations(rels, grids, w) for w in ("max", "min")},
        **{name: float(sum(v)) for name, v in costs.items()},
    }
    assert got == pytest.approx(want, rel=1e-12)
    assert len(names) == 5 + 6
    # a run without the R x M answers has no such accuracy (NaN), and its frame accuracies are unchanged
    plain = _census(BM.units(*args), BM_STATS)
    assert all(math.isnan(plain[f"acc_paper_{w}"]) for w in ("avg", "max", "min", "relation_max", "relation_min"))
    assert plain["acc_avg"] == pytest.approx(MM.accuracy_over_relations(rels, correct, "avg"), rel=1e-12)


def test_bear_confidence_statistics_equal_lm_pub_quiz_accumulation_on_the_full_run():
    """confidence, margin (all / correct / incorrect) and Brier: per relation over its (fact, template) docs,
    weighted by the relations' docs (``metrics.bear.support_weighted_mean``), every fact drawn. P2 is always
    right (no incorrect docs: left out of that split); P3, the largest, has one option (no margin)."""
    rng = np.random.default_rng(8)
    facts, relations, tpl, one, scores, golds = [], [], [], [], {}, {}
    for i in range(48):
        rel = f"P{min(i // 8, 3)}"  # 8, 8, 8 and 24 facts
        k = {"P0": 3, "P1": 4, "P2": 6, "P3": 1}[rel]
        for t in range(3):
            gold = int(rng.integers(0, k))
            s = rng.normal(0, 1.5, k) + (8.0 * np.eye(k)[gold] if rel == "P2" else 0.0)
            facts.append(f"f{i}"), relations.append(rel), tpl.append(t), one.append(rel == "P0")
            scores.setdefault(rel, []).append(s.tolist()), golds.setdefault(rel, []).append(gold)
    terms = {rel: MB.instance_confidences(scores[rel], golds[rel]) for rel in scores}
    seen = {rel: 0 for rel in scores}
    confidences, ranks = {key: [] for key in ("correct", *BB.CONFIDENCE_TERMS)}, []
    for rel in relations:
        i = seen[rel]
        seen[rel] += 1
        ranks.append(MB.gold_rank(scores[rel][i], golds[rel][i]))
        for key in confidences:
            confidences[key].append(terms[rel][key][i])
    names = [f"{t}{s}" for t in ("confidence", "margin") for s in ("", "_correct", "_incorrect")] + ["brier"]
    got = _census(BB.units(facts, relations, tpl, ranks, one, confidences), {m: BB_STATS[m] for m in names})
    per_rel = [MB.relation_confidence(scores[rel], golds[rel]) for rel in scores]
    assert per_rel[2]["confidence_score"]["incorrect"] is None and math.isnan(per_rel[3]["margin_of_confidence"]["all"])
    support = [v["support"] for v in per_rel]
    want = {"brier": MB.support_weighted_mean([v["brier_score"] for v in per_rel], support)}
    for metric, key in (("confidence", "confidence_score"), ("margin", "margin_of_confidence")):
        for sub in ("all", "correct", "incorrect"):
            name = metric if sub == "all" else f"{metric}_{sub}"
            want[name] = MB.support_weighted_mean([v[key][sub] for v in per_rel], support)
    assert got == pytest.approx(want, rel=1e-12)
    assert got["confidence"] != pytest.approx(np.mean([v["confidence_score"]["all"] for v in per_rel]))  # weighted
