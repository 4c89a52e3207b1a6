"""MONITOR metric functions (metrics/monitor.py) on hand-made probability vectors."""

from __future__ import annotations

import math

import pytest

from belief_tasks.metrics import monitor as M

# Fact A: one subword. Fact B: two subwords.
A_PRIMARY, A_FRAMES, A_NEGATIVES = [0.8], [[0.6], [0.2]], [[0.4], [0.8], [0.5]]
B_PRIMARY, B_FRAMES, B_NEGATIVES = [0.9, 0.5], [[0.5, 0.5], [0.9, 0.1]], [[0.1, 0.5]]

# By hand: A: PFD = (|.8-.6| + |.8-.2|)/2 = 0.4;  IRD = (.4 + 0 + .3)/3 = 0.7/3
#          B: PFD = ((.4+0)/2 + (0+.4)/2)/2 = 0.2;  IRD = (.8+0)/2 = 0.4
A_PFD, A_IRD, B_PFD, B_IRD = 0.4, 0.7 / 3, 0.2, 0.4


def test_pfd_and_ird_by_hand():
    assert M.prompt_framing_degree(A_PRIMARY, A_FRAMES) == pytest.approx(A_PFD)
    assert M.interference_relevance_degree(A_PRIMARY, A_NEGATIVES) == pytest.approx(A_IRD)
    assert M.prompt_framing_degree(B_PRIMARY, B_FRAMES) == pytest.approx(B_PFD)
    assert M.interference_relevance_degree(B_PRIMARY, B_NEGATIVES) == pytest.approx(B_IRD)


def test_subword_mean_weights_each_subword_equally():
    # |.9-.1| on subword 1 and 0 on subword 2: mean over L=2 subwords, not a sum
    assert M.anchor_distance([0.9, 0.5], [0.1, 0.5]) == pytest.approx(0.4)
    assert M.mean_subword_probability([0.9, 0.5]) == pytest.approx(0.7)


def test_monitor_over_facts_of_different_lengths():
    # eq. 3: sum_c sqrt(.33 PFD^2 + .33 IRD^2 + .33 PFD*IRD) / sum_c mean primary probability
    num = math.sqrt(0.33 * (0.16 + (0.7 / 3) ** 2 + 0.4 * 0.7 / 3)) + math.sqrt(0.33 * (0.04 + 0.16 + 0.08))
    expected = num / (0.8 + 0.7)
    assert expected == pytest.approx(0.41511, abs=1e-5)
    got = M.monitor_from_anchors([A_PRIMARY, B_PRIMARY], [A_FRAMES, B_FRAMES], [A_NEGATIVES, B_NEGATIVES])
    assert got == pytest.approx(expected)
    assert M.monitor_score([A_PFD, B_PFD], [A_IRD, B_IRD], [0.8, 0.7]) == pytest.approx(expected)


def test_monitor_alpha_is_configurable():
    # a = (1, 0, 0): sum PFD / sum primary = (0.4 + 0.2) / 1.5
    assert M.monitor_score([A_PFD, B_PFD], [A_IRD, B_IRD], [0.8, 0.7], alpha=(1, 0, 0)) == pytest.approx(0.4)
    # a = (0, 1, 0): (0.7/3 + 0.4) / 1.5
    assert M.monitor_score([A_PFD, B_PFD], [A_IRD, B_IRD], [0.8, 0.7], alpha=(0, 1, 0)) == pytest.approx(
        (0.7 / 3 + 0.4) / 1.5
    )


def test_identical_anchors_give_zero_distance():
    assert M.monitor_from_anchors([[0.3, 0.6]], [[[0.3, 0.6]] * 7], [[[0.3, 0.6]] * 5]) == 0.0


def test_mismatched_subword_lengths_are_refused():
    with pytest.raises(ValueError, match="subwords"):
        M.prompt_framing_degree([0.5, 0.5], [[0.5]])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        M.interference_relevance_degree([1.5], [[0.5]])


def test_frame_accuracies_and_summary():
    correct = [[1, 0, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]]  # 4 facts x 3 frames
    assert M.frame_accuracies(correct).tolist() == [0.75, 0.25, 0.25]
    assert M.accuracy_summary(correct) == pytest.approx({"avg": 1.25 / 3, "max": 0.75, "min": 0.25})


def test_mean_over_groups_is_unweighted_and_skips_nan():
    assert M.mean_over_groups({"P17": 0.2, "P19": 0.6, "P20": float("nan")}) == pytest.approx(0.4)


def test_bootstrap_stderr_is_seeded_and_sensible():
    items = [0.0, 1.0] * 50
    a = M.bootstrap_stderr(items, lambda xs: sum(xs) / len(xs), iters=300, seed=1)
    assert a == M.bootstrap_stderr(items, lambda xs: sum(xs) / len(xs), iters=300, seed=1)
    assert a == pytest.approx(0.05, abs=0.01)  # sqrt(.25 / 100)


def test_fact_quantities_by_hand():
    q = M.fact_quantities(B_PRIMARY, B_FRAMES, B_NEGATIVES)
    # frames' mean probabilities: (.5+.5)/2 = .5 and (.9+.1)/2 = .5; the negative's (.1+.5)/2 = .3
    assert q == pytest.approx(
        {"pfd": B_PFD, "ird": B_IRD, "primary_prob": 0.7, "frame_prob": 0.5, "negative_prob": 0.3}
    )
    assert M.mean_anchor_probability(A_NEGATIVES) == pytest.approx((0.4 + 0.8 + 0.5) / 3)
    with pytest.raises(ValueError, match="at least one"):
        M.mean_anchor_probability([])


def test_relations_are_scored_alone_then_averaged_without_weights():
    rels = ["P1", "P1", "P1", "P2"]
    assert M.relation_means(rels, [0.1, 0.2, 0.6, 0.9]) == pytest.approx({"P1": 0.3, "P2": 0.9})
    # (0.3 + 0.9) / 2, not the pooled mean 0.45
    assert M.mean_over_relations(rels, [0.1, 0.2, 0.6, 0.9]) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="relation labels"):
        M.mean_over_relations(["P1"], [0.1, 0.2])


def test_monitor_over_relations_is_eq3_per_relation():
    # P1 holds facts A and B (eq. 3 over both: 0.41511 above); P2 one fact with PFD = IRD = 0
    got = M.monitor_over_relations(["P1", "P1", "P2"], [A_PFD, B_PFD, 0.0], [A_IRD, B_IRD, 0.0], [0.8, 0.7, 0.5])
    assert got == pytest.approx((0.41511 + 0.0) / 2, abs=1e-5)
    assert math.isnan(M.monitor_over_relations([], [], [], []))


def test_accuracies_over_relations():
    # P1: frames accuracies (1, .5) -> avg .75, max 1, min .5; P2: (0, 1) -> avg .5, max 1, min 0
    rels, correct = ["P1", "P1", "P2"], [[1, 0], [1, 1], [0, 1]]
    assert M.accuracy_over_relations(rels, correct, "avg") == pytest.approx((0.75 + 0.5) / 2)
    assert M.accuracy_over_relations(rels, correct, "max") == pytest.approx(1.0)
    assert M.accuracy_over_relations(rels, correct, "min") == pytest.approx(0.25)
    with pytest.raises(ValueError, match="which"):
        M.accuracy_over_relations(rels, correct, "median")
    # Table 4's max / min across the fact datasets: of the relations' average accuracies (.75 and .5)
    assert M.accuracy_across_relations(rels, correct, "max") == pytest.approx(0.75)
    assert M.accuracy_across_relations(rels, correct, "min") == pytest.approx(0.5)
    # frame 2 exists only in P3 (3 frames): P1 and P2 are left out, not counted as wrong
    rels3, correct3 = rels + ["P3"], correct + [[0, 0, 1]]
    assert M.frame_accuracy_over_relations(rels3, correct3, 2) == 1.0
    assert M.frame_accuracy_over_relations(rels3, correct3, 1) == pytest.approx((0.5 + 1 + 0) / 3)
    assert math.isnan(M.frame_accuracy_over_relations(rels, correct, 5))


def test_bootstrap_stderr():
    assert math.isnan(M.bootstrap_stderr([1.0], lambda xs: sum(xs) / len(xs)))
    assert M.bootstrap_stderr([2.0, 2.0, 2.0], lambda xs: sum(xs) / len(xs)) == 0.0
    # two values 0 and 1: resample means are 0, .5 or 1 with probabilities 1/4, 1/2, 1/4: sd -> sqrt(1/8)
    se = M.bootstrap_stderr([0.0, 1.0], lambda xs: sum(xs) / len(xs), iters=20_000, seed=3)
    assert se == pytest.approx(math.sqrt(1 / 8), rel=0.02)
    assert se == M.bootstrap_stderr([0.0, 1.0], lambda xs: sum(xs) / len(xs), iters=20_000, seed=3)  # seeded
