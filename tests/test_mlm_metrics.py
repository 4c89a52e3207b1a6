"""BELIEF-for-encoders metrics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from belief_tasks.metrics import belief as B
from belief_tasks.metrics import belief_mlm as M
from belief_tasks.scoring import belief_mlm as S


def rec(fact, template, form, rank, pred="x", conf=0.5, relation="R", top10=None):
    return {
        "relation": relation,
        "fact_id": fact,
        "template_id": template,
        "subject_form": form,
        "gold_rank": rank,
        "pred": pred,
        "confidence": conf,
        "confidence_top10": conf + 0.05 if top10 is None else top10,
        "seed": 7,
        "draws": 20_000,
        "relation_kept": 6,
        "relation_dropped": 2,
    }


# fact A: t1 -> ranks 1 and 4 (two subject forms), t2 -> rank 1; fact B: only t1, rank None; fact C: only t1, rank 2
RECORDS = [
    rec("A", "t1", "label", 1, pred="x", conf=0.9),
    rec("A", "t1", "alias1", 4, pred="x", conf=0.8),
    rec("A", "t2", "label", 1, pred="y", conf=0.2),
    rec("B", "t1", "label", None, pred="z", conf=0.1),
    rec("C", "t1", "label", 2, pred="x", conf=0.6),
    rec("C", "t1", "alias1", 2, pred="x", conf=0.4),
]


def test_acc_at_k_and_mrr_per_prompt():
    ranks = [1, 3, None, 12]
    assert M.vocabulary_top_k_share(ranks, 1) == 0.25
    assert M.vocabulary_top_k_share(ranks, 10) == 0.5
    assert M.mean_reciprocal_rank(ranks) == pytest.approx((1 + 1 / 3 + 0 + 1 / 12) / 4)  # 17/48


def test_fact_expectations_follow_the_belief_draw():
    # A: mean(t1 = (1+0)/2, t2 = 1) = 0.75; B: 0 (falls back to its own prompts); C: t1 = 0, t2 missing -> 0
    ids = S.prompt_ids(RECORDS)
    assert ids[0] == ["A", "A", "A", "B", "C", "C"] and ids[2] == ["t1", "t1", "t2", "t1", "t1", "t1"]
    ranks = S.ranks_of(RECORDS)
    acc1 = M.fact_expectations(*ids, [M.hit(r, 1) for r in ranks])
    assert acc1.tolist() == [0.75, 0.0, 0.0]
    cols = S.draw_columns(RECORDS, 1)
    assert B.expected_accuracy(*cols) == pytest.approx(acc1.mean())  # the shared implementation agrees
    # MRR: A: mean((1 + 1/4)/2, 1) = 0.8125; B: 0; C: 1/2
    rr = M.fact_expectations(*ids, [M.reciprocal(r) for r in ranks])
    assert rr.tolist() == pytest.approx([0.8125, 0.0, 0.5])
    assert M.expected_mrr(*ids, ranks) == pytest.approx((0.8125 + 0 + 0.5) / 3)


def test_token_consistency():
    # A: predictions x, x, y -> 1 of 3 pairs agree; B: one prompt, left out; C: x, x -> 1
    facts, relations, _ = S.prompt_ids(RECORDS)
    preds = [r["pred"] for r in RECORDS]
    assert M.fact_consistencies(facts, relations, preds).tolist() == pytest.approx([1 / 3, 1.0])
    assert M.token_consistency(facts, relations, preds) == pytest.approx(2 / 3)
    # punctuation tokens are compared by identity (normalising would make "." agree with nothing)
    assert M.token_consistency(["A", "A"], ["R", "R"], [".", "."]) == 1.0
    # the same fact id under two relations is two pairs
    assert math.isnan(M.token_consistency(["A", "A"], ["R", "S"], ["x", "x"]))


def test_bias_level_equation():
    assert M.bias_level([0.5, 0.5]) == pytest.approx(0.0)
    assert M.bias_level([1.0, 0.0, 0.0]) == pytest.approx(1.0)
    # H = 1.5 ln 2, H_max = ln 3
    assert M.bias_level([0.5, 0.25, 0.25]) == pytest.approx(1 - 1.5 * math.log(2) / math.log(3))
    assert M.bias_level([2.0, 2.0]) == pytest.approx(0.0)  # renormalised
    assert math.isnan(M.bias_level([1.0]))


def cf(template, form, probs, relation="R"):
    return {"relation": relation, "template_id": template, "subject_form": form, "candidate_probs": probs}


def test_bias_single_and_multi_by_hand():
    records = [
        cf("t1", "na", {"a": 0.2, "b": 0.2}),  # -> (.5, .5)
        cf("t1", "qmark", {"a": 0.3, "b": 0.1}),  # -> (.75, .25); ensemble (.625, .375): bias 0.045566
        cf("t2", "na", {"a": 0.1, "b": 0.3, "c": 0.1}),  # c is not shared by t2's prompts: dropped
        cf("t2", "qmark", {"a": 0.1, "b": 0.3}),  # ensemble (.25, .75): bias 0.188722
    ]
    cols = S.bias_columns(records)
    dists = M.template_distributions(*cols)
    assert dists[("R", "t1")] == pytest.approx({"a": 0.625, "b": 0.375})
    assert dists[("R", "t2")] == pytest.approx({"a": 0.25, "b": 0.75})
    assert M.bias_single(*cols) == pytest.approx((0.045566 + 0.188722) / 2, abs=1e-5)
    # multi-prompt: average the two templates' distributions first -> (.4375, .5625): bias 0.011301
    assert M.bias_multi(*cols) == pytest.approx(0.011301, abs=1e-5)
    assert M.bias_multi(*cols) < M.bias_single(*cols)  # averaging prompts lowers the bias
    assert S.bias_single(records) == M.bias_single(*cols) and S.bias_multi(records) == M.bias_multi(*cols)


def test_task_aggregations_on_records():
    # Acc@1: mean of 20,000 draws, close to the exact expectation 0.25
    assert S.acc_at_1(RECORDS) == pytest.approx(0.25, abs=0.01)
    # Acc@10: A 1, B 0, C 1 -> 2/3
    assert S.acc_at_10(RECORDS) == pytest.approx(2 / 3, abs=0.01)
    assert S.mrr(RECORDS) == pytest.approx((0.8125 + 0 + 0.5) / 3)
    assert S.consist(RECORDS) == pytest.approx(2 / 3)
    # Overconf@1: mean confidence 0.5 - mean hit@1 (2/6) = 1/6; Overconf@10: 0.5 - 5/6
    assert S.overconf_at_1(RECORDS) == pytest.approx(0.5 - 2 / 6)
    # Overconf@10 with the top-10 mass as confidence (each record: max prob + 0.05): 0.55 - 5/6;
    # with the maximum probability (v1's text): 0.5 - 5/6, never above Overconf@1
    assert S.overconf_at_10(RECORDS) == pytest.approx(0.55 - 5 / 6)
    assert S.overconf_at_10_maxprob(RECORDS) == pytest.approx(0.5 - 5 / 6)
    assert S.overconf_at_10_maxprob(RECORDS) <= S.overconf_at_1(RECORDS)
    # fluctuation: A is right in a draw with probability 3/4 (t1: 1/2, t2: 1), the others never
    # -> the draw's accuracy is 1/3 or 0; the range is 1/3, SD = sqrt(p (1 - p)) / 3 with p = 3/4
    assert S.acc_at_1_range(RECORDS) == pytest.approx(1 / 3)
    assert S.acc_at_1_sd(RECORDS) == pytest.approx(math.sqrt(0.75 * 0.25) / 3, abs=0.005)
    assert S.prompts_kept(RECORDS) == 6 and S.prompts_dropped(RECORDS) == 2
    two_relations = RECORDS + [dict(rec("D", "t1", "label", 1, relation="S"), relation_kept=3, relation_dropped=0)]
    assert S.prompts_kept(two_relations) == 9
    # stderrs exist where the records are a sample of facts; none for range, SD and counts
    assert S.METRICS["acc@1"].stderr(RECORDS) > 0 and S.METRICS["mrr"].stderr(RECORDS) > 0
    assert S.METRICS["acc@1_range"].stderr_function is None is S.METRICS["prompts_kept"].stderr_function


def test_draws_are_seeded_and_reproducible():
    a = S.accuracy_values(RECORDS)
    other_seed = [dict(r, seed=8) for r in RECORDS]
    assert (a == S.accuracy_values(list(RECORDS))).all()
    assert not (a == S.accuracy_values(other_seed)).all()
