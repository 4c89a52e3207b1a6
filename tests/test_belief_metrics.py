"""BELIEF-ICL metrics against hand-computed values (metrics/belief.py)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from belief_tasks.facts.matching import outputs_agree
from belief_tasks.metrics import belief as M

# ---------------------------------------------------------------- Acc@1 and its fluctuation


def test_fluctuation_is_range_and_population_sd():
    rng, sd = M.fluctuation([0.2, 0.4, 0.6])
    assert rng == pytest.approx(0.4)
    assert sd == pytest.approx(math.sqrt((0.04 + 0 + 0.04) / 3))  # 1/N, not 1/(N-1)


def test_draws_share_the_template_across_a_relation():
    # Two facts of one relation: both right under t1, both wrong under t2. Sharing the
    # template makes every draw 0 or 1; independent per-fact templates would give 0.5 too.
    v = M.accuracy_draws(["a", "a", "b", "b"], ["R"] * 4, ["t1", "t2", "t1", "t2"], [1, 0, 1, 0], n_draws=2000, seed=3)
    assert set(np.unique(v)) == {0.0, 1.0}
    assert v.mean() == pytest.approx(0.5, abs=0.05)
    rng, sd = M.fluctuation(v)
    assert rng == 1.0 and sd == pytest.approx(0.5, abs=0.01)


def test_draws_hand_computed_two_relations():
    # R1: one fact, right under t1 only. R2: one fact with one template, always right.
    # Each draw is 0.5 or 1.0 with probability 1/2: mean .75, range .5, population SD .25.
    v = M.accuracy_draws(
        ["a", "a", "c"], ["R1", "R1", "R2"], ["t1", "t2", "u1"], [True, False, True], n_draws=20000, seed=0
    )
    assert set(np.unique(v)) == {0.5, 1.0}
    assert v.mean() == pytest.approx(0.75, abs=0.01)
    rng, sd = M.fluctuation(v)
    assert rng == 0.5 and sd == pytest.approx(0.25, abs=0.005)
    assert M.expected_accuracy(["a", "a", "c"], ["R1", "R1", "R2"], ["t1", "t2", "u1"], [True, False, True]) == 0.75


def test_draws_pick_one_subject_expression_uniformly():
    # One template, three subject expressions of which one is right: P(correct) = 1/3.
    v = M.accuracy_draws(["a"] * 3, ["R"] * 3, ["t"] * 3, [1, 0, 0], n_draws=30000, seed=1)
    assert v.mean() == pytest.approx(1 / 3, abs=0.01)
    assert M.expected_accuracy(["a"] * 3, ["R"] * 3, ["t"] * 3, [1, 0, 0]) == pytest.approx(1 / 3)


def test_draws_are_seeded_and_chunking_keeps_the_distribution():
    ids = (
        ["a", "a", "b", "b", "c", "c"],
        ["R"] * 4 + ["S"] * 2,
        ["t1", "t2", "t1", "t2", "u", "u"],
        [1, 0, 1, 0, 1, 0],
    )
    a = M.accuracy_draws(*ids, n_draws=500, seed=7)
    b = M.accuracy_draws(*ids, n_draws=500, seed=7, chunk_cells=3)
    assert np.array_equal(a, M.accuracy_draws(*ids, n_draws=500, seed=7))
    assert not np.array_equal(a, M.accuracy_draws(*ids, n_draws=500, seed=8))
    assert a.mean() == pytest.approx(b.mean(), abs=0.1)  # same distribution, however it is chunked
    assert a.mean() == pytest.approx(0.5, abs=0.05)


def test_draws_in_row_blocks_are_the_same_draws(monkeypatch):
    """A chunk's uniforms are drawn in blocks of rows to bound memory: the same stream, so the same
    accuracies to the last bit, whatever the block (1 row, 7 rows, a block past the chunk)."""
    ids = (
        ["a", "a", "b", "b", "c", "c", "d"],
        ["R"] * 4 + ["S"] * 3,
        ["t1", "t2", "t1", "t2", "u", "v", "u"],
        [1, 0, 1, 1, 0, 1, 1],
    )
    whole = M.accuracy_draws(*ids, n_draws=101, seed=5)  # one block per chunk
    chunked = M.accuracy_draws(*ids, n_draws=101, seed=5, chunk_cells=40)  # 10 draws per chunk
    for cells in (4, 4 * 7):  # blocks of 1 and 7 rows (4 pairs)
        monkeypatch.setattr(M, "BLOCK_CELLS", cells)
        assert np.array_equal(M.accuracy_draws(*ids, n_draws=101, seed=5), whole)
        assert np.array_equal(M.accuracy_draws(*ids, n_draws=101, seed=5, chunk_cells=40), chunked)


def test_accuracy_stderr_is_over_pairs():
    # pair expected accuracies: a = 1, b = 0 -> SE = sd([1, 0], ddof=1) / sqrt(2) = 0.5
    assert M.accuracy_stderr(["a", "b"], ["R", "R"], ["t", "t"], [1, 0]) == pytest.approx(0.5)


# ---------------------------------------------------------------- consistency (v3 eq. 1)


def test_consistency_hand_computed():
    pairs = ["A", "A", "A", "B", "B", "C"]
    answers = ["Paris", "paris.", "Lyon", "a guitar", "guitars", "Rome"]
    # A: 1 of 3 prompt pairs agree; B: "a guitar" contains "guitar" -> 1; C has one prompt: left out.
    assert M.pair_consistency(pairs, answers) == {"A": pytest.approx(1 / 3), "B": 1.0}
    assert M.consistency(pairs, answers) == pytest.approx((1 / 3 + 1) / 2)


def test_consistency_empty_answers_agree_with_nothing():
    assert M.consistency(["A", "A", "A"], ["", "", "Paris"]) == 0.0
    assert math.isnan(M.consistency(["A"], ["Paris"]))


def test_consistency_matches_brute_force():
    rng = np.random.default_rng(0)
    words = ["Paris", "paris", "the Paris", "Lyon", "", "New York", "York", "guitars", "guitar"]
    pairs = [f"p{int(i)}" for i in rng.integers(0, 6, 80)]
    answers = [words[int(i)] for i in rng.integers(0, len(words), 80)]
    expected = []
    for p in sorted(set(pairs)):
        a = [x for q, x in zip(pairs, answers) if q == p]
        if len(a) > 1:
            combos = list(itertools.combinations(a, 2))
            expected.append(sum(outputs_agree(x, y) for x, y in combos) / len(combos))
    assert M.consistency(pairs, answers) == pytest.approx(np.mean(expected))


# ---------------------------------------------------------------- overconfidence (v3 eq. 2)


def test_overconfidence_hand_computed_with_bins():
    conf, acc = [0.4, 1.0, 0.6, 0.8], [0, 1, 0, 1]
    bins = M.calibration_bins(conf, acc, n_bins=2)
    assert bins == [
        {"size": 2, "confidence": pytest.approx(0.9), "accuracy": 1.0},
        {"size": 2, "confidence": pytest.approx(0.5), "accuracy": 0.0},
    ]
    # 1/2 (0.9 - 1) + 1/2 (0.5 - 0) = 0.2
    assert M.overconfidence(conf, acc, n_bins=2) == pytest.approx(0.2)


def test_overconfidence_with_equal_bins_is_mean_confidence_minus_mean_accuracy():
    # With M equal-size bins each weight is 1/M, so the weighted signed difference
    # telescopes to mean(confidence) - mean(accuracy).
    rng = np.random.default_rng(1)
    conf = rng.random(200)
    acc = rng.random(200) < 0.3
    assert M.overconfidence(conf, acc, n_bins=10) == pytest.approx(conf.mean() - acc.mean())
    assert all(b["size"] == 20 for b in M.calibration_bins(conf, acc, 10))
    underconfident = M.overconfidence([0.1, 0.2, 0.3, 0.2, 0.1, 0.2, 0.3, 0.1, 0.2, 0.3], [1] * 10)
    assert underconfident == pytest.approx(-0.8)


def test_calibration_bins_order_by_descending_confidence():
    conf = [i / 10 for i in range(10)]
    bins = M.calibration_bins(conf, [0] * 5 + [1] * 5, n_bins=10)
    assert [b["confidence"] for b in bins] == pytest.approx(sorted(conf, reverse=True))
    assert [b["accuracy"] for b in bins] == [1] * 5 + [0] * 5


def test_overconfidence_stderr():
    # differences 0.5, -0.5 -> sd (ddof 1) = 0.7071, / sqrt(2) = 0.5
    assert M.overconfidence_stderr([0.5, 0.5], [0, 1]) == pytest.approx(0.5)


def test_sampled_confidence_is_bidirectional_share():
    assert M.sampled_confidence("Paris", ["Paris.", "paris", "Lyon", "the Paris"]) == 0.75
    assert M.sampled_confidence("the city of Paris", ["Paris", "Rome"]) == 0.5


# ---------------------------------------------------------------- 1-word ratio and coverage


def test_one_word_ratio():
    assert M.one_word_ratio(["Paris", "New York", "", "guitars"]) == 0.5
    assert M.one_word_stderr(["Paris", "New York"]) == pytest.approx(0.5)


def test_one_word_ratio_counts_whitespace_words_and_empty_rate_counts_answers_without_any():
    answers = ["U.S.", "Jean-Paul", "O'Brien", "Coca-Cola", "New York", "1984", "", "?!"]
    # one word: U.S., Jean-Paul, O'Brien, Coca-Cola, 1984 -> 5 of 8; no word: "" and "?!" -> 2 of 8
    assert M.one_word_ratio(answers) == 5 / 8
    assert M.empty_answer_rate(answers) == 2 / 8
    # binomial standard errors, sample SD (ddof 1) / sqrt(n): p(1-p) n/(n-1) / n
    assert M.one_word_stderr(answers) == pytest.approx((5 / 8 * 3 / 8 * 8 / 7 / 8) ** 0.5)
    assert M.empty_answer_stderr(answers) == pytest.approx((2 / 8 * 6 / 8 * 8 / 7 / 8) ** 0.5)
    assert M.empty_answer_rate(["42", "1984", "- -"]) == pytest.approx(1 / 3)  # numbers are words


def test_knowledge_coverage_hand_computed():
    # R1, templates t1 t2: pair a: t1 -> [right, wrong] (two subject forms), t2 -> [wrong];
    #                      pair b: t1 -> [wrong], t2 -> [right].  R2: pair c, one wrong prompt.
    pairs = ["a", "a", "a", "b", "b", "c"]
    rels = ["R1", "R1", "R1", "R1", "R1", "R2"]
    tpls = ["t1", "t1", "t2", "t1", "t2", "u"]
    correct = [1, 0, 0, 0, 1, 0]
    cov = M.knowledge_coverage(pairs, rels, tpls, correct)
    # average: a (1/2 + 0)/2 = .25, b (0 + 1)/2 = .5, c 0 -> .25
    assert cov["average"] == pytest.approx(0.25)
    # maximum: R1's templates tie at 1/2 (best subject form per fact); the first wins: a right, b wrong; c wrong
    assert cov["maximum"] == pytest.approx(1 / 3)
    # oracle: a and b have a right prompt
    assert cov["oracle"] == pytest.approx(2 / 3)
    se = M.coverage_stderr(pairs, rels, tpls, correct)
    assert se["oracle"] == pytest.approx(np.std([1, 1, 0], ddof=1) / math.sqrt(3))


def test_maximum_uses_the_best_template_per_relation():
    # R: t2 is right for both facts, t1 for none -> maximum 1, average .5
    cov = M.knowledge_coverage(["a", "a", "b", "b"], ["R"] * 4, ["t1", "t2", "t1", "t2"], [0, 1, 0, 1])
    assert cov == {"average": 0.5, "maximum": 1.0, "oracle": 1.0}


def test_bad_input_is_rejected():
    with pytest.raises(ValueError, match="length"):
        M.accuracy_draws(["a"], ["R"], ["t", "u"], [1])
    with pytest.raises(ValueError, match="relations"):
        M.knowledge_coverage(["a", "a"], ["R", "S"], ["t", "t"], [1, 1])
