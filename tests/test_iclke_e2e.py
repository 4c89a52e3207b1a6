"""IC-LKE / EIC-LKE through lm-eval on the bundled model (stock ``hf`` backend).

Kept short: few test facts, fewer in-context examples (``n_examples``), since the stock
backend re-encodes σ for every option.
"""

from __future__ import annotations

import math

import pytest
from test_iclke_prompts import write_trex_fixture

from belief_tasks.metrics import iclke as M
from belief_tasks.scoring.iclke import columns

from harness import evaluate

pytestmark = pytest.mark.e2e


def _args(model_path) -> str:
    return f"pretrained={model_path},device=cpu,dtype=float32"


def _records(res, task):
    return [s["acc"] for s in res["samples"][task]]


def test_iclke_sample_easy_relations_beat_chance(model_path):
    md = {"relations": "P36,P37", "max_facts_per_relation": 4, "n_examples": 8}
    res = evaluate(["belief_iclke_bear"], _args(model_path), metadata=md)
    recs = _records(res, "belief_iclke_bear")
    out = res["results"]["belief_iclke_bear"]
    assert len(recs) == 8
    n_options = {r["relation"]: len(r["options"]) for r in recs}
    assert n_options["P36"] >= 40 and n_options["P37"] >= 40  # the sample's answer spaces
    for r in recs:
        assert len(r["logprobs"]) == len(r["options"]) and all(math.isfinite(x) and x < 0 for x in r["logprobs"])
        assert r["correct"] == M.is_correct(r["logprobs"], r["gold_index"])
    # chance is 1/|options| < 2.5 %; the bundled 135M model knows some capitals and languages
    chance = 1 / min(n_options.values())
    assert out["acc,none"] >= 0.2 > 5 * chance
    assert out["gold_prob,none"] > 3 * chance  # mean normalised p(gold); uniform would be ~chance
    per_rel = M.per_relation_accuracy(*columns(recs))
    assert set(per_rel) == {"P36", "P37"} and max(per_rel.values()) >= 0.2
    assert out["acc_macro,none"] == pytest.approx(sum(per_rel.values()) / 2)
    # Accuracy@K from the logged records equals the aggregated number (NaN when D_K is empty)
    for k in M.THRESHOLDS:
        want = M.accuracy_at_confidence([r["logprobs"] for r in recs], [r["gold_index"] for r in recs], k)
        got = out[f"acc@{k},none"]
        assert (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want)
    # every option of a fact was one loglikelihood request on the same context σ
    sample = res["samples"]["belief_iclke_bear"][0]
    contexts = {a[0] for a in sample["arguments"]}
    assert len(contexts) == 1 and [a[1] for a in sample["arguments"]] == [" " + o for o in sample["acc"]["options"]]


def test_iclke_trex_mc_fixture(model_path, tmp_path):
    folder = write_trex_fixture(tmp_path / "trex")
    res = evaluate(["belief_iclke"], _args(model_path), metadata={"source": "", "trex_mc_path": str(folder)})
    recs = _records(res, "belief_iclke")
    assert len(recs) == 7 and all(len(r["options"]) == 6 for r in recs)
    # capitals and official languages of well-known countries, 6 options each (chance 1/6);
    # the bundled 135M model gets the three languages and none of the four capitals
    assert res["results"]["belief_iclke"]["acc,none"] >= 3 / 7
    assert M.per_relation_accuracy(*columns(recs))["70"] == 1.0


def test_eiclke_sequences_on_stock_backend(model_path):
    md = {"relations": "P37", "max_facts_per_relation": 3, "max_options": 8}
    res = evaluate(["belief_eiclke"], _args(model_path), metadata=md)
    samples = sorted(res["samples"]["belief_eiclke"], key=lambda s: s["acc"]["slot"])
    assert [s["acc"]["slot"] for s in samples] == [0, 1, 2] and len({s["acc"]["group"] for s in samples}) == 1
    first, last = samples[0], samples[2]
    # slot 0 sees only training facts: one context for all options; later slots see option k of
    # the earlier test facts in sequence k, so every option has its own context
    assert len({a[0] for a in first["arguments"]}) == 1
    assert len({a[0] for a in last["arguments"]}) == len(last["arguments"]) == 8
    for k, (ctx, cont) in enumerate(last["arguments"]):
        assert cont == " " + last["acc"]["options"][k]
        for earlier in samples[:2]:
            # appendix C.2: "subject object" tuples joined by commas
            assert f"{earlier['acc']['subject']} {earlier['acc']['options'][k]}, " in ctx
        assert ctx.startswith(first["arguments"][0][0].rsplit(" " + first["acc"]["subject"], 1)[0])
    assert all(len(s["acc"]["logprobs"]) == 8 for s in samples)
