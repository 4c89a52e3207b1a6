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
    assert M.monitor_score([A_PFD, B_PFD], [A_IRD, B_IRD], [0.8, 0.7], alpha=(0, 1, 0)) == pytest.approx((0.7 / 3 + 0.4) / 1.5)


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
