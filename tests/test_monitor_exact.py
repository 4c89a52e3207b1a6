"""Per-subword probabilities from the harness equal a direct teacher-forced forward pass (1e-5)."""

from __future__ import annotations

import math

import pytest
import torch

from belief_tasks.facts.schema import Entity, Fact, Relation, Template
from belief_tasks.prompts import monitor as P
from belief_tasks.requests import PER_TOKEN_LOGLIKELIHOOD, encode_request
from belief_tasks.tasks import monitor_subwords as S

pytestmark = pytest.mark.e2e

REL = Relation(
    "P36",
    "capital",
    frames=(
        Template("P36_f0", "What is the capital of [X]? [Y]", "question"),
        Template("P36_f1", "Which city serves as the capital of [X]? [Y]", "question"),
    ),
)
# single-token, multi-token, accented and CJK objects (the last splits characters into bytes)
FACTS = [
    Fact("a", "P36", Entity("France"), (Entity("Paris"),), (Entity("Rome"), Entity("Kaohsiung City"))),
    Fact("b", "P36", Entity("Switzerland"), (Entity("Bern"),), (Entity("Zürich"),)),
    Fact("c", "P36", Entity("Taiwan"), (Entity("Kaohsiung City"),), (Entity("Paris"),)),
    Fact("d", "P36", Entity("China"), (Entity("北京"),), (Entity("Paris"),)),
]


@pytest.fixture(scope="module")
def lm(model_path):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(model_path), device="cpu", dtype="float32", batch_size=8)


def _instances(request_type, args_list):
    from lm_eval.api.instance import Instance

    return [
        Instance(request_type=request_type, doc={}, arguments=a, idx=i, metadata=("t", 0, 1))
        for i, a in enumerate(args_list)
    ]


def _docs():
    return [
        {
            "fact_id": f.id,
            "relation": f.relation,
            "object": f.object.label,
            "anchors": [
                {"key": a.key, "kind": a.kind, "text": a.text} for a in P.anchor_prompts(f, REL, P.answer_format(None))
            ],
        }
        for f in FACTS
    ]


def _direct(model, codec, prompt: str, answer: str, counts: list[int]) -> list[float]:
    """Teacher forcing by hand: one forward pass over prompt + answer, unit probability = product of its tokens'."""
    ctx, ans = encode_request(codec, prompt, answer)
    ids = torch.tensor([ctx + ans])
    with torch.no_grad():
        logp = model(ids).logits.log_softmax(-1)[0]
    token_lp = [logp[len(ctx) + i - 1, t].item() for i, t in enumerate(ans)]
    starts = [sum(counts[:k]) for k in range(len(counts))]
    return [math.exp(sum(token_lp[s : s + c])) for s, c in zip(starts, counts)]


def test_codec_encodes_like_the_hf_backend(lm, model_path):
    codec = S.Codec({"pretrained": str(model_path)})
    for s in ["Question: What is the capital of France?\nAnswer: Paris", "北京", " Zürich"]:
        assert codec.encode([s])[0] == lm.tok_encode(s)


def test_prefix_route_is_exact_on_hf(lm, model_path):
    codec = S.Codec({"pretrained": str(model_path)})
    n_units = n_tokens = 0
    for doc in _docs():
        pl = S.plan(doc, codec)
        reqs = S.scoring_requests(pl, "prefix")
        assert {kind for kind, _ in reqs} == {"loglikelihood"} and len(reqs) == S.n_scoring_requests(pl, "prefix")
        scoring = [args for _, args in reqs]
        results = lm.loglikelihood(_instances("loglikelihood", scoring), disable_tqdm=True)
        got = S.unit_probabilities(results, pl, "prefix")
        for anchor, counts, probs in zip(pl.anchors, pl.counts, got):
            want = _direct(lm.model, codec, anchor["text"], pl.answer, counts)
            assert probs == pytest.approx(want, abs=1e-5), (doc["object"], anchor["key"])
        n_units += len(pl.units)
        n_tokens += pl.n_tokens[0]
        assert "".join(pl.units) == pl.answer
        if doc["object"].isascii():
            assert len(pl.units) == pl.n_tokens[0]  # one unit per subword
    assert n_tokens > n_units  # the CJK object's byte tokens were merged into whole characters


def test_per_token_route_matches_prefix_route(model_path):
    pytest.importorskip("belief_tasks.backends.shared")
    from belief_tasks.backends.shared import HFSharedPrefixLM

    shared = HFSharedPrefixLM(pretrained=str(model_path), device="cpu", dtype="float32", batch_size=8)
    codec = S.Codec({"pretrained": str(model_path)})
    for doc in _docs()[:3]:
        pl = S.plan(doc, codec)
        reqs = S.scoring_requests(pl, "per_token")
        scoring = [args for kind, args in reqs if kind == PER_TOKEN_LOGLIKELIHOOD]
        assert len(scoring) == len(pl.anchors) == S.n_scoring_requests(pl, "per_token")
        got = S.unit_probabilities(
            shared.per_token_loglikelihood(_instances(PER_TOKEN_LOGLIKELIHOOD, scoring)), pl, "per_token"
        )
        for anchor, counts, probs in zip(pl.anchors, pl.counts, got):
            assert probs == pytest.approx(_direct(shared.model, codec, anchor["text"], pl.answer, counts), abs=1e-5)
