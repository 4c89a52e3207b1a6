"""hf-mlm: PLL against a direct per-position computation, batching, mask_topk, refusals, registry."""

from __future__ import annotations

import math

import pytest
import torch
from lm_eval.api.instance import Instance
from test_mlm_tiny import build_tiny_mlm, tiny_dir  # noqa: F401  (fixture)

# "Montreal is a city." -> [CLS] mont ##real is a city . [SEP]  (word ids None 0 0 1 2 3 4 None)
SENTENCE = "Montreal is a city."
# which positions are masked when scoring each position, by hand from the papers' definitions
MASKS = {
    "original": {1: {1}, 2: {2}, 3: {3}, 4: {4}, 5: {5}, 6: {6}},
    "within_word_l2r": {1: {1, 2}, 2: {2}, 3: {3}, 4: {4}, 5: {5}, 6: {6}},  # mont also hides ##real
}


def load(folder, **args):
    from belief_tasks.backends.mlm import HFMaskedLM

    return HFMaskedLM(pretrained=str(folder), dtype="float32", device="cpu", **args)


def ll(lm, pairs):
    return lm.loglikelihood([Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(pairs)], disable_tqdm=True)


def direct_scores(model, tok, text: str, masks: dict[int, set[int]]) -> dict[int, float]:
    """One unbatched forward pass per scored position, masking exactly ``masks[pos]``."""
    ids = tok(text)["input_ids"]
    out = {}
    for pos, hidden in masks.items():
        x = list(ids)
        for h in hidden:
            x[h] = tok.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([x])).logits[0, pos]
        out[pos] = float(torch.log_softmax(logits, -1)[ids[pos]])
    return out


@pytest.fixture(scope="module")
def lms(tiny_dir):  # noqa: F811
    return {m: load(tiny_dir, pll_metric=m, batch_size=4) for m in ("original", "within_word_l2r")}


@pytest.mark.parametrize("metric", ["original", "within_word_l2r"])
def test_pll_equals_direct_per_position_computation(lms, metric):
    lm = lms[metric]
    direct = direct_scores(lm.model, lm.tokenizer, SENTENCE, MASKS[metric])
    ((whole, _),) = ll(lm, [("", SENTENCE)])
    assert whole == pytest.approx(sum(direct.values()), abs=1e-5)
    # context / continuation: only the continuation's tokens are scored, the context stays visible
    ((cont, _),) = ll(lm, [("Montreal is", " a city.")])
    assert cont == pytest.approx(direct[4] + direct[5] + direct[6], abs=1e-5)
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (SENTENCE,), 0)], disable_tqdm=True)
    assert rolling[0] == pytest.approx(whole, abs=1e-6)


def test_within_word_masks_the_rest_of_a_word_in_the_continuation(lms):
    # [CLS] the city is mont ##real . [SEP]: scoring "mont" must hide "##real" too
    lm = lms["within_word_l2r"]
    text = "The city is Montreal."
    direct = direct_scores(lm.model, lm.tokenizer, text, {4: {4, 5}, 5: {5}, 6: {6}})
    ((score, _),) = ll(lm, [("The city is", " Montreal.")])
    assert score == pytest.approx(sum(direct.values()), abs=1e-5)
    ((orig, _),) = ll(lms["original"], [("The city is", " Montreal.")])
    assert orig != pytest.approx(score, abs=1e-4)  # the two schemes really differ on a split word


def test_matches_lm_pub_quiz(lms):
    """lm-pub-quiz 0.3.3's MaskedLMEvaluator on the same model: the same per-statement sums."""
    pytest.importorskip("lm_pub_quiz")
    from lm_pub_quiz import Evaluator

    statements = [SENTENCE, "The capital of France is Paris.", "Berlin is the capital of Germany, a country."]
    for metric, lm in lms.items():
        ref = Evaluator.from_model(lm.model, model_type="MLM", tokenizer=lm.tokenizer, device="cpu", pll_metric=metric)
        expected = ref.score_answers(template="[Y]", answers=statements, reduction="sum", batch_size=3)
        ours = [s for s, _ in ll(lm, [("", s) for s in statements])]
        assert ours == pytest.approx(expected, abs=1e-4)


def test_span_scoring_matches_lm_pub_quiz_conditional_score(lms):
    """Answer-only PLL inside a statement (text after the answer stays visible)."""
    pytest.importorskip("lm_pub_quiz")
    from lm_pub_quiz import Evaluator

    template, subject, answers = "[X] is the capital of [Y], a country.", "Berlin", ["Germany", "Montreal", "Rome"]
    for metric, lm in lms.items():
        ref = Evaluator.from_model(
            lm.model, model_type="MLM", tokenizer=lm.tokenizer, device="cpu", pll_metric=metric, conditional_score=True
        )
        expected = ref.score_answers(template=template, subject=subject, answers=answers, reduction="sum")
        reqs = []
        for a in answers:
            text = template.replace("[X]", subject).replace("[Y]", a)
            start = text.index(a)
            reqs.append(Instance("loglikelihood_span", {}, (text, start, start + len(a)), 0))
        ours = [s for s, _ in lm.loglikelihood_span(reqs, disable_tqdm=True)]
        assert ours == pytest.approx(expected, abs=1e-4)
    # "Montreal" is two tokens: under within_word_l2r its first piece is scored with both masked
    text = "Berlin is the capital of Montreal, a country."
    direct = direct_scores(lms["within_word_l2r"].model, lms["within_word_l2r"].tokenizer, text, {6: {6, 7}, 7: {7}})
    ((span, _),) = lms["within_word_l2r"].loglikelihood_span([Instance("loglikelihood_span", {}, (text, 25, 33), 0)])
    assert span == pytest.approx(sum(direct.values()), abs=1e-5)


def test_batching_order_and_duplicates_do_not_change_scores(tiny_dir):  # noqa: F811
    pairs = [
        ("", SENTENCE),
        ("The capital of France is", " Paris."),
        ("", "Rome is the capital of Italy."),
        ("The city is", " Montreal."),
        ("", SENTENCE),
        ("Paris", " is a city"),
    ]
    one = [s for s, _ in ll(load(tiny_dir, batch_size=1), pairs)]
    many = [s for s, _ in ll(load(tiny_dir, batch_size=64), pairs)]
    shuffled = [s for s, _ in ll(load(tiny_dir, batch_size=3), pairs[::-1])][::-1]
    assert many == pytest.approx(one, abs=1e-5) and shuffled == pytest.approx(one, abs=1e-5)
    assert one[0] == one[4]  # the duplicate request got the same score
    assert all(s < 0 for s in one)


def test_is_greedy_and_empty_continuation(tmp_path):
    lm = load(build_tiny_mlm(tmp_path, favour="paris"))
    (paris, g1), (rome, g2), (empty, g3) = ll(
        lm,
        [
            ("The capital of France is", " Paris"),
            ("The capital of France is", " Rome"),
            ("The capital of France is", ""),
        ],
    )
    assert g1 is True and g2 is False  # the favoured token is the argmax at its masked position
    assert paris > rome
    assert (empty, g3) == (0.0, True)


def test_generate_until_refuses_with_a_useful_message(lms):
    with pytest.raises(NotImplementedError, match="cannot generate") as err:
        lms["original"].generate_until([Instance("generate_until", {}, ("Q:", {"until": ["\n"]}), 0)])
    assert "belief_mlm" in str(err.value) and "belief_bear" in str(err.value)


def test_mask_topk_matches_the_model(lms):
    lm = lms["original"]
    tok, prompt = lm.tokenizer, "The capital of France is [MASK]."
    req = Instance("mask_topk", {}, (prompt, 5, ("Paris", "Montreal", "ROME")), 0)
    (resp,) = lm.mask_topk([req], disable_tqdm=True)
    ids = tok(prompt)["input_ids"]
    pos = ids.index(tok.mask_token_id)
    with torch.no_grad():
        lp = torch.log_softmax(lm.model(input_ids=torch.tensor([ids])).logits[0, pos], -1)
    top = torch.topk(lp, 5)
    assert resp["token_ids"] == top.indices.tolist()
    assert resp["logprobs"] == pytest.approx(top.values.tolist(), abs=1e-5)
    assert resp["tokens"] == tok.convert_ids_to_tokens(top.indices.tolist())
    paris = tok.convert_tokens_to_ids("paris")
    assert resp["targets"]["Paris"]["token_id"] == paris
    assert resp["targets"]["Paris"]["rank"] == int((lp > lp[paris]).sum()) + 1
    assert resp["targets"]["Paris"]["logprob"] == pytest.approx(float(lp[paris]), abs=1e-5)
    assert resp["targets"]["ROME"]["token"] == "rome"  # uncased tokenizer
    assert resp["targets"]["Montreal"] is None  # two tokens: cannot fill one mask
    assert resp["vocab_size"] == lp.numel()
    assert math.isclose(sum(math.exp(v) for v in resp["logprobs"]), float(top.values.exp().sum()), rel_tol=1e-5)
    # the model's own mask token works as well as the marker; batching does not change the answer
    again = lm.mask_topk(
        [
            Instance("mask_topk", {}, ("Berlin is a [MASK].", 3), 0),
            Instance("mask_topk", {}, (prompt.replace("[MASK]", tok.mask_token), 5, ("Paris",)), 1),
        ]
    )
    assert again[1]["token_ids"] == resp["token_ids"] and again[0]["targets"] == {}


def test_use_cache_reads_mask_topk_and_spans_back(tiny_dir, tmp_path, monkeypatch):  # noqa: F811
    """lm-eval's CachingLM passes our request types through unread; hf-mlm reads its own cache
    (harness.read_through), so a resumed run makes not one forward pass for what it answered."""
    from lm_eval.api.model import CachingLM

    lm = load(tiny_dir, batch_size=4)
    topk = [
        Instance("mask_topk", {}, ("The capital of France is [MASK].", 5, ("Paris",)), 0),
        Instance("mask_topk", {}, ("Berlin is a [MASK].", 3), 1),
    ]
    spans = [Instance("loglikelihood_span", {}, ("Montreal is a city.", 0, 8), 0)]
    db = str(tmp_path / "cache_rank0.db")
    first = CachingLM(lm, db)
    answers = (first.mask_topk(topk), first.loglikelihood_span(spans))
    forwards = []
    forward = lm.model.forward
    monkeypatch.setattr(lm.model, "forward", lambda *a, **kw: forwards.append(1) or forward(*a, **kw))
    resumed = CachingLM(lm, db)
    assert (resumed.mask_topk(topk), resumed.loglikelihood_span(spans)) == answers
    assert forwards == []  # all read back
    more = topk + [Instance("mask_topk", {}, ("Rome is a [MASK].", 3), 2)]
    assert resumed.mask_topk(more)[:2] == answers[0] and len(forwards) == 1  # only the new prompt is run


def test_mask_topk_needs_exactly_one_mask(lms):
    with pytest.raises(ValueError, match="exactly one"):
        lms["original"].mask_topk([Instance("mask_topk", {}, ("[MASK] is the capital of [MASK].", 3), 0)])
    with pytest.raises(ValueError, match="exactly one"):
        lms["original"].mask_topk([Instance("mask_topk", {}, ("Paris is a city.", 3), 0)])


def test_too_long_input_is_cut_on_the_left_but_never_the_scored_part(tiny_dir):  # noqa: F811
    lm = load(tiny_dir, max_length=8)
    ((short, _),) = ll(lm, [("the the the the the Montreal is", " a city.")])
    ((ref, _),) = ll(load(tiny_dir), [("Montreal is", " a city.")])  # the 8 tokens that remain
    assert short == pytest.approx(ref, abs=1e-5)
    with pytest.raises(ValueError, match="does not fit"):
        ll(lm, [("", "the the the the the Montreal is a city.")])


def test_bad_model_args(tiny_dir):  # noqa: F811
    with pytest.raises(ValueError, match="pll_metric"):
        load(tiny_dir, pll_metric="mean")


def test_registry_after_import():
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval.api.registry import get_model
    from lm_eval.models.huggingface import HFLM

    from belief_tasks.backends.mlm import HFMaskedLM

    assert get_model("hf-mlm") is HFMaskedLM
    assert get_model("hf") is HFLM
