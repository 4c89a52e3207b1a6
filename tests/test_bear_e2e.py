"""belief_bear end to end: the bundled SmolLM2 on real BEAR rows and on the sample, a tiny BERT on hf-mlm.

Scores are checked against lm-pub-quiz 0.3.3 itself (``Evaluator.evaluate_instance``)
on the same statements, so a wrong split, a missing BOS or a wrong capitalisation
shows up as a score difference, not just as a lower accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import evaluate

pytestmark = pytest.mark.e2e

ROWS = 4  # first rows of P30 (continents: 6 options, chance 1/6)


@pytest.fixture(scope="module")
def bear_subset(shared_data, tmp_path_factory) -> Path:
    """An lm-pub-quiz folder holding the first ROWS facts of P30, so both tools read the same rows."""
    src = shared_data / "bear" / "BEAR"
    out = tmp_path_factory.mktemp("bear") / "BEAR"
    out.mkdir()
    meta = json.loads((src / "metadata_relations.json").read_text())
    (out / "metadata_relations.json").write_text(json.dumps({"P30": meta["P30"]}))
    (out / "P30.jsonl").write_text("\n".join((src / "P30.jsonl").read_text().splitlines()[:ROWS]) + "\n")
    (out / "relation_info.json").write_text((shared_data / "bear" / "relation_info.json").read_text())
    return out


def records_of(results, task="belief_bear"):
    return [s["bear"] for s in results["samples"][task]]


def lm_pub_quiz_scores(kind, model, records, folder: Path, **evaluator_kw):
    """lm-pub-quiz's per-option scores for each of our records' (fact, template)."""
    from lm_pub_quiz import Evaluator

    meta = json.loads((folder / "metadata_relations.json").read_text())
    rows = {rid: (folder / f"{rid}.jsonl").read_text().splitlines() for rid in meta}
    ev = Evaluator.from_model(str(model), model_type=kind, device="cpu", **evaluator_kw)
    out = []
    for r in records:
        row = json.loads(rows[r["relation"]][int(r["fact_id"].rsplit("_", 1)[1]) - 1])
        out.append(
            ev.evaluate_instance(
                template=meta[r["relation"]]["templates"][r["template_index"]],
                answers=meta[r["relation"]]["answer_space_labels"],
                subject=row["sub_label"],
                reduction=r["reduction"],
                batch_size=8,
            )
        )
    return out


def assert_same_as_lm_pub_quiz(records, reference):
    from belief_tasks.tasks.bear import record_scores

    for r, ref in zip(records, reference):
        ours = record_scores(r)
        assert np.max(np.abs(ours - np.asarray(ref))) < 1e-4, r["fact_id"]
        assert r["pred"] == ref.index(max(ref))


def test_causal_lm_on_real_bear_rows(model_path, bear_subset):
    res = evaluate(
        ["belief_bear"],
        f"pretrained={model_path},dtype=float32,device=cpu",
        metadata={"source": "", "bear_path": str(bear_subset)},
        batch_size=32,
    )
    recs = records_of(res)
    assert len(recs) == ROWS * 3 and all(len(r["ll"]) == 6 for r in recs)
    m = res["results"]["belief_bear"]
    # continents are easy: far above the 1/6 chance level
    assert m["bear,none"] >= 0.5 and m["p_at_5,none"] >= m["bear,none"]
    assert m["bear,none"] == pytest.approx(np.mean([m[f"bear_t{t},none"] for t in range(3)]))
    assert m["bear_1toN,none"] == pytest.approx(m["bear,none"]) and np.isnan(m["bear_1to1,none"])
    assert recs[0]["domains"] == ["Geographic"]
    assert_same_as_lm_pub_quiz(recs, lm_pub_quiz_scores("CLM", model_path, recs, bear_subset))


def test_answer_to_end_switch_is_lm_pub_quiz_conditional_score(model_path, bear_subset):
    # add_bos_token=True: lm-pub-quiz conditions on BOS; lm-eval adds none to a non-empty context otherwise.
    res = evaluate(
        ["belief_bear"],
        f"pretrained={model_path},dtype=float32,device=cpu,add_bos_token=True",
        metadata={"source": "", "bear_path": str(bear_subset), "scoring": "answer_to_end", "templates": "0"},
        batch_size=32,
        limit=2,
    )
    recs = records_of(res)
    assert [r["scoring"] for r in recs] == ["answer_to_end"] * 2
    assert_same_as_lm_pub_quiz(recs, lm_pub_quiz_scores("CLM", model_path, recs, bear_subset, conditional_score=True))
    # answer-only scores are a part of the answer_to_end ones: each is larger (less negative) than the whole
    res2 = evaluate(
        ["belief_bear"],
        f"pretrained={model_path},dtype=float32,device=cpu,add_bos_token=True",
        metadata={"source": "", "bear_path": str(bear_subset), "scoring": "answer", "templates": "0"},
        batch_size=32,
        limit=2,
    )
    for a, b in zip(records_of(res2), recs):
        assert all(x > y for x, y in zip(a["ll"], b["ll"]))


def test_causal_lm_on_the_sample(model_path):
    res = evaluate(
        ["belief_bear"],
        f"pretrained={model_path},dtype=float32,device=cpu",
        metadata={"relations": "P36", "max_facts_per_relation": 3, "templates": "0"},
        batch_size=32,
    )
    recs = records_of(res)
    assert len(recs) == 3 and len(recs[0]["ll"]) >= 40
    m = res["results"]["belief_bear"]
    # capitals of well-known countries against >= 40 options (chance <= 2.5%)
    assert m["bear,none"] >= 2 / 3 and m["bear_1to1,none"] == m["bear,none"] and m["p_at_10,none"] == 1.0


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    from test_mlm_tiny import build_tiny_mlm

    return build_tiny_mlm(tmp_path_factory.mktemp("tiny_bear"), favour="paris")


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_masked_lm_on_hf_mlm(tiny_bert, reduction, tmp_path):
    """hf-mlm's PLL (within_word_l2r) through our task equals lm-pub-quiz's MaskedLMEvaluator."""
    from lm_pub_quiz import Evaluator

    from belief_tasks.data import load_facts

    md = {
        "relations": "P36",
        "max_facts_per_relation": 3,
        "templates": "0,1",
        "reduction": reduction,
        "pretrained": str(tiny_bert),
    }
    res = evaluate(
        ["belief_bear"], f"pretrained={tiny_bert},dtype=float32,device=cpu", model="hf-mlm", metadata=md, batch_size=64
    )
    recs = records_of(res)
    assert len(recs) == 6
    # the tiny model puts ~all mass on "paris": every statement with Paris wins
    assert {r["pred_label"] for r in recs} == {"Paris"}
    fs = load_facts("bear", {"source": "sample"})
    rel = fs.relations["P36"]
    ev = Evaluator.from_model(str(tiny_bert), model_type="MLM", device="cpu")
    for r in recs:
        fact = next(f for f in fs.facts_of("P36") if f.id == r["fact_id"])
        ref = ev.evaluate_instance(
            template=rel.templates_of("statement")[r["template_index"]].text,
            answers=[e.label for e in rel.answer_space],
            subject=fact.subject.label,
            reduction=reduction,
            batch_size=64,
        )
        assert_same_as_lm_pub_quiz([r], [ref])
