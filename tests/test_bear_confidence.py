"""BEAR's confidence metrics (lm-pub-quiz 0.3.3's ``metrics/confidence.py``): hand-computed values,
the aggregations over records, and equality with lm-pub-quiz's own classes on the same scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from belief_tasks.metrics import bear as MB
from belief_tasks.scoring import bear as SC
from belief_tasks.scoring.common import NoStderr
from belief_tasks.scoring.wiring import Aggregation

# One relation with three options. A: p = (.5, .25, .25), gold 0 (right); B: p = (.2, .6, .2), gold 2 (wrong:
# the model picks option 1). Scores are log-probabilities shifted by -10 (the softmax does not see the shift).
A_P, B_P = [0.5, 0.25, 0.25], [0.2, 0.6, 0.2]
SCORES = [list(np.log(A_P) - 10), list(np.log(B_P) - 10)]
GOLDS = [0, 2]
# by hand: entropies in bits; U = 2 distinct golds (0, 2) -> log2 U = 1, uncertainty = entropy
H_A = 1.5  # .5 * 1 + 2 * .25 * 2
H_B = -(2 * 0.2 * math.log2(0.2) + 0.6 * math.log2(0.6))  # 1.370951
BRIER_A = ((0.5 - 1) ** 2 + 0.25**2 + 0.25**2) / 3  # 0.125
BRIER_B = (0.2**2 + 0.6**2 + (0.2 - 1) ** 2) / 3  # 0.346667


def test_instance_terms_by_hand():
    got = MB.instance_confidences(SCORES, GOLDS)
    assert got["probs"] == pytest.approx(np.array([A_P, B_P]))
    assert got["correct"].tolist() == [1.0, 0.0]
    assert got["confidence"] == pytest.approx([0.5, 0.6])
    assert got["margin"] == pytest.approx([0.25, 0.4])
    assert got["entropy"] == pytest.approx([H_A, H_B])
    assert got["uncertainty"] == pytest.approx([H_A, H_B])
    assert got["brier"] == pytest.approx([BRIER_A, BRIER_B])


def test_relation_values_by_hand():
    rel = MB.relation_confidence(SCORES, GOLDS)
    assert rel["support"] == 2
    assert rel["avg_softmax"]["all"] == pytest.approx([0.35, 0.425, 0.225])
    assert rel["avg_softmax"]["correct"] == pytest.approx(A_P) and rel["avg_softmax"]["incorrect"] == pytest.approx(B_P)
    assert rel["confidence_score"] == pytest.approx({"all": 0.55, "correct": 0.5, "incorrect": 0.6})
    assert rel["margin_of_confidence"] == pytest.approx({"all": 0.325, "correct": 0.25, "incorrect": 0.4})
    assert rel["uncertainty_score"] == pytest.approx({"all": (H_A + H_B) / 2, "correct": H_A, "incorrect": H_B})
    assert rel["brier_score"] == pytest.approx((BRIER_A + BRIER_B) / 2)
    # only right answers: the incorrect split is empty (None, as lm-pub-quiz)
    assert MB.relation_confidence(SCORES[:1] * 2, [0, 0])["confidence_score"]["incorrect"] is None


def test_uncertainty_is_normalised_by_the_distinct_golds():
    # four options, golds 0, 1, 3 -> U = 3: uniform p has entropy 2 bits -> 2 / log2 3
    flat = [[0.0] * 4] * 3
    assert MB.uncertainty_normaliser([0, 1, 3]) == pytest.approx(math.log2(3))
    assert MB.instance_confidences(flat, [0, 1, 3])["uncertainty"] == pytest.approx([2 / math.log2(3)] * 3)
    assert math.isnan(MB.uncertainty_normaliser([1, 1]))  # one distinct gold: log2 1 = 0, undefined


def test_ties_several_golds_and_underflow():
    tie = MB.instance_confidences([[-1.0, -1.0, -5.0]], [1])
    assert tie["correct"].tolist() == [0.0]  # the first of tied options is the prediction (lm-pub-quiz's argmax)
    assert tie["margin"] == pytest.approx([0.0])
    # two correct options: the target is (1/2, 1/2, 0); p = (.5, .5, 0) scores a Brier of 0
    both = MB.instance_confidences([[0.0, 0.0, -800.0]], [[0, 1]])
    assert both["brier"] == pytest.approx([0.0], abs=1e-12) and both["correct"].tolist() == [1.0]
    # scores far below exp's range: exp(-1000) is 0 in float64, the shifted softmax still sums to 1
    deep = MB.instance_confidences([[-1000.0, -1001.0]], [0])
    assert deep["probs"][0] == pytest.approx([1 / (1 + math.e**-1), math.e**-1 / (1 + math.e**-1)])
    with pytest.raises(ValueError, match="one score per option"):
        MB.instance_confidences([[0.0, 1.0], [0.0]], [0, 0])


def test_support_weighted_mean_leaves_out_relations_without_a_value():
    assert MB.support_weighted_mean([0.5, 0.2], [1, 3]) == pytest.approx((0.5 + 0.6) / 4)
    assert MB.support_weighted_mean([0.5, None, float("nan")], [1, 3, 2]) == pytest.approx(0.5)
    assert math.isnan(MB.support_weighted_mean([None], [4]))


def _record(relation, scores, gold, template=0):
    return {
        "relation": relation,
        "fact_id": f"{relation}_{len(scores)}",
        "template_index": template,
        "gold": [gold],
        "ll": list(scores),
        "n_tokens": None,
        "reduction": "sum",
        "cardinality": "1:1",
        "domains": [],
    }


def test_aggregations_weight_relations_by_support():
    # R1 = the hand relation (2 rows); R2: one right row with p = (.9, .1), U = 1 (uncertainty undefined)
    r2 = list(np.log([0.9, 0.1]))
    records = [_record("R1", s, g) for s, g in zip(SCORES, GOLDS)] + [_record("R2", r2, 0)]
    assert SC.agg_confidence(records) == pytest.approx((2 * 0.55 + 0.9) / 3)
    assert SC.agg_confidence_correct(records) == pytest.approx((2 * 0.5 + 0.9) / 3)  # lm-pub-quiz's weights: support
    assert SC.agg_confidence_incorrect(records) == pytest.approx(0.6)  # R2 has no wrong row: left out
    assert SC.agg_margin(records) == pytest.approx((2 * 0.325 + 0.8) / 3)
    assert SC.agg_uncertainty(records) == pytest.approx((H_A + H_B) / 2)  # R2's is undefined: left out
    brier_r2 = (0.1**2 + 0.1**2) / 2
    assert SC.agg_brier(records) == pytest.approx((BRIER_A + BRIER_B + brier_r2) / 3)
    # over all rows the value is the pooled mean of the per-row term, so its stderr is that mean's
    assert SC.METRICS["confidence"].stderr(records) == pytest.approx(np.std([0.5, 0.6, 0.9], ddof=1) / math.sqrt(3))
    # a correct / incorrect split: the weighted mean of its rows (weight n_r / m_r: R1 2 / 1, R2 1 / 1), its
    # stderr with the weights fixed: sqrt(n / (n - 1) * sum w^2 (x - m)^2) / sum w
    m = (2 * 0.5 + 0.9) / 3
    assert SC.METRICS["confidence_correct"].stderr(records) == pytest.approx(
        math.sqrt(2 / 1 * (2**2 * (0.5 - m) ** 2 + 1 * (0.9 - m) ** 2)) / 3
    )
    assert math.isnan(SC.METRICS["confidence_incorrect"].stderr(records))  # one wrong row: no spread to estimate
    # a relation without a value (R2: one distinct answer, no uncertainty) is left out of the stderr too
    assert SC.METRICS["uncertainty"].stderr(records) == pytest.approx(np.std([H_A, H_B], ddof=1) / math.sqrt(2))
    assert set(SC.CONFIDENCE_METRICS) <= set(SC.METRICS)


def test_equal_to_lm_pub_quiz_on_random_scores():
    """lm-pub-quiz's own metric classes on the same instance tables: per relation to 1e-12."""
    pd = pytest.importorskip("pandas")
    conf = pytest.importorskip("lm_pub_quiz.metrics.confidence")
    rng = np.random.default_rng(0)
    for _ in range(25):
        n, k = int(rng.integers(3, 40)), int(rng.integers(2, 30))
        scores, golds = rng.normal(-30, 6, size=(n, k)), rng.integers(0, k, n)
        if len(set(golds.tolist())) < 2:
            continue
        table = pd.DataFrame({"pll_scores": [list(s) for s in scores], "answer_idx": golds})
        ours = MB.relation_confidence(scores, golds)
        for cls in (
            conf.SoftmaxBase,
            conf.ConfidenceMargin,
            conf.ConfidenceScore,
            conf.UncertaintyScore,
            conf.BrierScore,
        ):
            metric = cls()
            metric.add_instances_from_table(table)
            for name, theirs in metric.compute().items():
                if not isinstance(theirs, dict):
                    assert ours[name] == pytest.approx(theirs, abs=1e-12, rel=0)
                    continue
                for subset, value in theirs.items():
                    if value is None:
                        assert ours[name][subset] is None
                    else:
                        assert np.asarray(ours[name][subset]) == pytest.approx(np.asarray(value), abs=1e-12, rel=0)


def test_report_calibration_view(tmp_path):
    """belief-report's BEAR section: the confidence table (checked against the results JSON), per relation,
    the average softmax vectors and the reliability bins, on the hand relation above."""
    from test_report_synthetic import bear_record, close, read_csv, write_run

    from belief_tasks.report import build_report

    records = [bear_record("R1", f"f{i}", 0, s, g, "1:1", ["Geo"]) for i, (s, g) in enumerate(zip(SCORES, GOLDS))]
    hand = {"bear": 0.5, "confidence": 0.55, "margin_incorrect": 0.4, "brier": (BRIER_A + BRIER_B) / 2}
    write_run(tmp_path / "runs", "m", {"belief_bear": records}, {"belief_bear": hand})
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.mismatched == [] and report.checked == 4
    tables = tmp_path / "r" / "tables"
    (row,) = read_csv(tables / "bear_confidence.csv")
    assert close(row["uncertainty_correct"], H_A) and close(row["confidence_stderr"], 0.05)  # sd(.5, .6) / sqrt 2
    (rel,) = read_csv(tables / "bear_confidence_relations.csv")
    assert rel["relation"] == "R1" and close(rel["margin_all"], 0.325) and close(rel["confidence_incorrect"], 0.6)
    softmax = [
        float(r[k])
        for r in read_csv(tables / "bear_avg_softmax.csv")
        for k in ("option", "all", "correct", "incorrect")
    ]
    assert softmax == pytest.approx([0, 0.35, 0.5, 0.2, 1, 0.425, 0.25, 0.6, 2, 0.225, 0.25, 0.2])
    (bin_,) = read_csv(tables / "bear_calibration_bins.csv")  # two instances: one bin
    assert close(bin_["confidence"], 0.55) and close(bin_["accuracy"], 0.5)
    assert (tmp_path / "r" / "figures" / "bear_calibration.png").is_file()


def test_a_budgeted_run_of_every_fact_estimates_the_plain_values():
    """The budget's estimators (``scoring.bear.budget_units``: each doc's terms, relation by relation, records
    of two relations interleaved) give the plain aggregations when every fact is drawn; the uncertainty's
    normaliser depends on which facts a sample holds, so a budgeted run reports it as NaN, with no standard
    error or interval."""
    from belief_tasks.families import BEAR

    rng = np.random.default_rng(2)
    records = []
    for i in range(12):
        for rel, k in (("P1", 3), ("P2", 5)):
            for t in range(2):
                records.append(
                    {
                        "relation": rel,
                        "fact_id": f"{rel}_{i}",
                        "template_index": t,
                        "gold": [int(rng.integers(0, k))],
                        "ll": rng.normal(0, 2, k).tolist(),
                        "n_tokens": None,
                        "reduction": "sum",
                        "cardinality": "1:N",
                        "domains": [],
                        "budget": 1.0,
                        "population": 12,
                        "drawn": 12,
                    }
                )
    for name in ("confidence", "confidence_correct", "margin_incorrect", "brier"):
        agg = Aggregation(name, SC.METRICS[name], BEAR.budgeted)
        assert agg(records) == pytest.approx(SC.METRICS[name].aggregation(records), rel=1e-12), name
    unc = Aggregation("uncertainty", SC.METRICS["uncertainty"], BEAR.budgeted)
    no_stderr = unc.stderr(records)  # NotEstimable: no standard error, and its reason
    assert math.isnan(unc(records)) and unc.interval(records) is None
    assert isinstance(no_stderr, NoStderr) and no_stderr == "N/A" and "not estimable" in no_stderr.reason
