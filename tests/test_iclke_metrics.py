"""IC-LKE metrics against hand-computed values (eqs. 2-5, appendix D)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from belief_tasks.metrics import iclke as M

LN = math.log


def test_object_logprob_is_product_of_token_probabilities_without_length_normalisation():
    # P(y) = 0.5 * 0.4 * 0.5 = 0.1  (eq. 2); a length-normalised score would be 0.1 ** (1/3) = 0.464
    assert math.exp(M.object_logprob([LN(0.5), LN(0.4), LN(0.5)])) == pytest.approx(0.1)
    # a 1-token option with p = 0.2 beats a 3-token option with p = 0.1 although each of its tokens is likelier
    assert M.prediction([LN(0.1), LN(0.2)]) == 1


def test_prediction_and_ties():
    assert M.prediction([-3.0, -1.0, -2.0]) == 1
    assert M.prediction([-1.0, -1.0, -2.0]) is None  # shared maximum
    assert M.is_correct([-3.0, -1.0, -2.0], 1)
    assert not M.is_correct([-3.0, -1.0, -2.0], 0)
    # a tie for the maximum counts as wrong even when the gold is one of the tied options
    assert not M.is_correct([-1.0, -1.0, -2.0], 0)
    assert not M.is_correct([-1.0, -1.0, -2.0], 1)


def test_accuracy_eq4_by_hand():
    lps = [[-1, -2, -3], [-2, -1, -3], [-1, -1, -5], [-4, -3, -0.5]]
    gold = [0, 0, 0, 2]
    # correct, wrong, tie (wrong), correct -> 2 / 4
    assert M.accuracy(lps, gold) == 0.5


def test_normalised_probabilities_and_confidences():
    lps = [LN(0.2), LN(0.1), LN(0.1)]
    p = M.normalised_probs(lps)
    np.testing.assert_allclose(p, [0.5, 0.25, 0.25])
    assert M.gold_confidence(lps, 1) == pytest.approx(0.25)
    assert M.prediction_confidence(lps) == pytest.approx(0.5)
    # stable for very small probabilities (50 tokens of log-prob -20 each)
    assert M.normalised_probs([-1000.0, -1000.0 - LN(3)]) == pytest.approx([0.75, 0.25])


def test_accuracy_at_k_by_hand():
    # normalised confidences of the predicted option: 0.8, 0.6, 0.45, 0.5 (tie at 0.5/0.5)
    lps = [
        [LN(0.8), LN(0.2)],  # pred 0, gold 0 -> correct, conf 0.8
        [LN(0.4), LN(0.6)],  # pred 1, gold 0 -> wrong, conf 0.6
        [LN(0.45), LN(0.3), LN(0.25)],  # pred 0, gold 0 -> correct, conf 0.45
        [LN(0.5), LN(0.5)],  # tie -> wrong, conf 0.5
    ]
    gold = [0, 0, 0, 0]
    assert M.accuracy(lps, gold) == 0.5
    assert M.accuracy_at_confidence(lps, gold, 0.1) == 0.5  # all four
    assert M.accuracy_at_confidence(lps, gold, 0.5) == pytest.approx(1 / 3)  # 0.8, 0.6, 0.5: correct, wrong, tie
    assert M.accuracy_at_confidence(lps, gold, 0.6) == 0.5  # 0.8 correct, 0.6 wrong
    assert M.accuracy_at_confidence(lps, gold, 0.7) == 1.0
    assert math.isnan(M.accuracy_at_confidence(lps, gold, 0.9))  # nothing that confident
    assert M.coverage_at_confidence(lps, 0.5) == 0.75
    assert M.THRESHOLDS == (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def test_per_relation_and_macro_accuracy():
    rels = ["P36", "P36", "P36", "P36", "P37", "P37"]
    lps = [[-1, -2], [-1, -2], [-2, -1], [-1, -2], [-1, -2], [-1, -1]]
    gold = [0, 0, 0, 1, 0, 0]
    assert M.per_relation_accuracy(lps, gold, rels) == {"P36": 0.5, "P37": 0.5}
    keep = [0, 1, 2, 4, 5]
    assert M.macro_accuracy([lps[i] for i in keep], [gold[i] for i in keep], [rels[i] for i in keep]) == pytest.approx(
        (2 / 3 + 1 / 2) / 2
    )
    # sqrt(0.25/4 + 0.25/2) / 2
    assert M.macro_accuracy_stderr(lps, gold, rels) == pytest.approx(math.sqrt(0.25 / 4 + 0.25 / 2) / 2)
    assert M.binomial_stderr([1, 0, 1, 0]) == pytest.approx(0.25)
    assert math.isnan(M.macro_accuracy([], [], [])) and math.isnan(M.macro_accuracy_stderr([], [], []))
    # one test fact in P37: its variance is not estimable, so neither is the macro accuracy's
    one = [0, 1, 2, 3, 4]
    assert math.isnan(M.macro_accuracy_stderr([lps[i] for i in one], [gold[i] for i in one], [rels[i] for i in one]))
    assert M.macro_accuracy([lps[i] for i in one], [gold[i] for i in one], [rels[i] for i in one]) == pytest.approx(
        (2 / 4 + 1) / 2
    )


def test_stderrs_and_gold_confidences_by_hand():
    lps = [[LN(0.8), LN(0.2)], [LN(0.4), LN(0.6)], [LN(0.45), LN(0.3), LN(0.25)], [LN(0.5), LN(0.5)]]
    gold = [0, 0, 0, 0]  # correct, wrong, correct, tie (wrong)
    assert M.accuracy_stderr(lps, gold) == pytest.approx(math.sqrt(0.5 * 0.5 / 4))
    # D_0.5 = confidences 0.8, 0.6, 0.5: correct, wrong, tie -> p = 1/3 over 3
    assert M.accuracy_at_confidence_stderr(lps, gold, 0.5) == pytest.approx(math.sqrt((1 / 3) * (2 / 3) / 3))
    assert math.isnan(M.accuracy_at_confidence_stderr(lps, gold, 0.9))
    np.testing.assert_allclose(M.gold_confidences(lps, gold), [0.8, 0.4, 0.45, 0.5])


def test_relation_agreement():
    a = {"P1": 0.1, "P2": 0.5, "P3": 0.9, "P4": 0.3}
    b = {"P1": 0.2, "P2": 0.6, "P3": 1.0, "P4": 0.4, "P9": 0.0}
    r, rho, n = M.relation_agreement(a, b)
    assert (r, rho, n) == (pytest.approx(1.0), pytest.approx(1.0), 4)
    r, rho, n = M.relation_agreement(a, {"P1": 0.9, "P2": 0.5, "P3": 0.1, "P4": 0.7})
    assert r == pytest.approx(-1.0) and rho == pytest.approx(-1.0)
