"""BEAR metrics against hand-computed values, the records process_results writes, and the switches."""

from __future__ import annotations

import math

import numpy as np
import pytest

from belief_tasks.metrics import bear as M
from belief_tasks.scoring import bear as S
from belief_tasks.scoring.bear import BearRecord
from belief_tasks.tasks import bear as T


def rec(ll, gold, t=0, rel="P1", card="1:N", domains=("Geo",), n_tokens=None, reduction="sum"):
    return {
        "ll": list(ll),
        "gold": [gold],
        "template_index": t,
        "relation": rel,
        "cardinality": card,
        "domains": list(domains),
        "n_tokens": n_tokens,
        "reduction": reduction,
    }


def test_reduction_sum_and_mean():
    assert M.reduce_scores([-3.0, -4.0]).tolist() == [-3.0, -4.0]
    assert M.reduce_scores([-3.0, -4.0], [3, 2], "mean").tolist() == [-1.0, -2.0]
    with pytest.raises(ValueError, match="n_tokens"):
        M.reduce_scores([-1.0], None, "mean")
    with pytest.raises(ValueError, match="reduction"):
        M.reduce_scores([-1.0], [1], "max")


def test_ties_go_to_the_first_option_like_lm_pub_quiz():
    scores = [-2.0, -1.0, -1.0, -5.0]
    assert M.ranking(scores).tolist() == [1, 2, 0, 3]
    assert M.gold_rank(scores, 2) == 1 and M.gold_rank(scores, 1) == 0 and M.gold_rank(scores, 3) == 3
    assert M.gold_rank(scores, [3, 2]) == 1  # several correct objects: the best-ranked one counts


def test_precision_at_k_eq2():
    ranks = [0, 1, 4, 9, 10]
    assert M.top_k_share(ranks, 1) == pytest.approx(1 / 5)
    assert M.top_k_share(ranks, 5) == pytest.approx(3 / 5)
    assert M.top_k_share(ranks, 10) == pytest.approx(4 / 5)
    assert math.isnan(M.top_k_share([], 1))


def test_bear_score_is_the_mean_over_templates_with_its_stderr():
    # template 0: 2/2 correct; template 1: 1/2; template 2: 0/2  -> scores 1, .5, 0
    records = [
        rec([-1, -2], 0, t=0),
        rec([-2, -1], 1, t=0),
        rec([-1, -2], 0, t=1),
        rec([-1, -2], 1, t=1),
        rec([-2, -1], 0, t=2),
        rec([-1, -2], 1, t=2),
    ]
    ranks, templates = S.ranks_of(records), S.templates_of(records)
    assert ranks == [0, 0, 0, 1, 1, 1]  # gold option first, or behind the other one
    assert M.template_scores(ranks, templates) == {0: 1.0, 1: 0.5, 2: 0.0}
    assert M.bear_score(ranks, templates) == pytest.approx(0.5)
    # sample std of (1, .5, 0) is .5; / sqrt(3)
    assert M.bear_score_stderr(ranks, templates) == pytest.approx(0.5 / math.sqrt(3))
    assert S.agg_bear(records) == pytest.approx(0.5)
    assert S.METRICS["bear"].stderr(records) == pytest.approx(0.5 / math.sqrt(3))
    assert S.agg_bear_t1(records) == pytest.approx(0.5)
    assert S.METRICS["bear_t1"].stderr(records) == pytest.approx(np.std([1, 0], ddof=1) / math.sqrt(2))
    assert math.isnan(M.bear_score_stderr(ranks[:2], templates[:2]))  # one template: no spread to measure
    assert math.isnan(M.bear_score([], []))


def test_cardinality_split_relation_and_domain_accuracy():
    records = [
        rec([-1, -2], 0, rel="P36", card="1:1", domains=["Geographic"]),
        rec([-2, -1], 0, rel="P36", card="1:1", domains=["Geographic"]),
        rec([-1, -2], 0, rel="P27", card="1:N", domains=["Biographical", "Political"]),
        rec([-1, -2, -3], 2, rel="P6", card="1:N", domains=["Political"]),
    ]
    assert S.agg_bear_1to1(records) == pytest.approx(0.5)
    assert S.agg_bear_1toN(records) == pytest.approx(0.5)
    ranks = S.ranks_of(records)
    assert M.accuracy_by(ranks, [r["relation"] for r in records]) == {"P27": 1.0, "P36": 0.5, "P6": 0.0}
    # a record counts in each of its domains
    assert M.accuracy_by(ranks, [r["domains"] for r in records]) == {
        "Biographical": 1.0,
        "Geographic": 0.5,
        "Political": 0.5,
    }
    assert S.agg_p_at_1(records) == pytest.approx(0.5)
    assert S.agg_p_at_5(records) == pytest.approx(1.0)


def doc(**over):
    base = {
        "doc_id": "P36_1/P36_t0",
        "relation": "P36",
        "fact_id": "P36_1",
        "template_id": "P36_t0",
        "fact_key": '{"key": "P36|italy", "relation": "P36", "subject_id": "Q38", "subjects": ["italy"], '
        '"objects": ["Rome"], "object_ids": ["Q220"]}',
        "template_index": 0,
        "options": '["Paris", "Rome", "Berlin"]',
        "gold": "[1]",
        "cardinality": "1:1",
        "domains": '["Geographic"]',
        "scoring": "statement",
        "reduction": "sum",
        "n_tokens": None,
    }
    base.update(over)
    return base


def test_process_results_record():
    out = T.process_results(doc(), [(-9.0, False), (-4.0, True), (-6.0, False)])
    assert set(out) == set(S.METRICS)
    assert set(out["bear"]) == set(BearRecord.__annotations__)
    r = out["bear"]
    assert r["pred"] == 1 and r["pred_label"] == "Rome" and r["gold_label"] == "Rome" and r["rank"] == 0
    assert r["correct"] == 1 and r["ll"] == [-9.0, -4.0, -6.0] and r["domains"] == ["Geographic"]
    assert r["subject_form"] == "label" and r["fact_id"] == "P36_1" and r["template_id"] == "P36_t0"
    assert r["fact_key"]["key"] == "P36|italy" and r["fact_key"]["object_ids"] == ["Q220"]  # read back from the doc
    with pytest.raises(RuntimeError, match="3 options"):
        T.process_results(doc(), [(-1.0, False)])


def test_mean_reduction_switch_changes_the_winner():
    # sums favour the short option 0; per token the long option 1 wins (-8/4 = -2 > -3/1)
    results = [(-3.0, False), (-8.0, False), (-20.0, False)]
    by_sum = T.process_results(doc(gold="[0]"), results)["bear"]
    by_mean = T.process_results(doc(gold="[0]", reduction="mean", n_tokens="[1, 4, 4]"), results)["bear"]
    assert by_sum["pred"] == 0 and by_sum["correct"] == 1
    assert by_mean["pred"] == 1 and by_mean["correct"] == 0 and by_mean["rank"] == 1
    assert S.agg_bear([by_sum]) == 1.0 and S.agg_bear([by_mean]) == 0.0


def test_mean_reduction_counts_tokens_like_lm_pub_quiz(model_path):
    """n_tokens equals the number of tokens lm-pub-quiz scores (its non-special tokens after BOS)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_path))
    statements = ["The capital of West Bengal is Kolkata.", "Kolkata serves as the capital of West Bengal."]
    counts = T.token_counts(tok, "", statements)
    tok.add_bos_token = True
    enc = tok(statements, return_special_tokens_mask=True)
    assert counts == [sum(1 - m for m in mask) for mask in enc["special_tokens_mask"]]
    # answer mode: only the answer's tokens
    ans = T.token_counts(tok, "The capital of West Bengal is", [" Kolkata", " Rio de Janeiro"])
    whole = [
        len(tok("The capital of West Bengal is" + a, add_special_tokens=False)["input_ids"])
        for a in (" Kolkata", " Rio de Janeiro")
    ]
    base = len(tok("The capital of West Bengal is", add_special_tokens=False)["input_ids"])
    assert ans == [w - base for w in whole] and ans[1] > ans[0] >= 1


def test_mean_docs_carry_token_counts(model_path):
    from belief_tasks.data import load_facts
    from belief_tasks.options import parse_options

    md = {
        "source": "sample",
        "relations": "P36",
        "max_facts_per_relation": 1,
        "templates": "0",
        "reduction": "mean",
        "pretrained": str(model_path),
    }
    (d,) = T.build_docs(load_facts("bear", md), parse_options(T.OPTIONS, md))
    assert d["reduction"] == "mean" and len(d["n_tokens"]) == len(d["options"]) and min(d["n_tokens"]) >= 5
