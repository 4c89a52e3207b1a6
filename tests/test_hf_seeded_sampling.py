"""Seeded samples on stock ``hf`` decoded together (belief_tasks.hooks.hf_sampling).

The batched path must give every seeded sample the text the one-request path gives it
(``BELIEF_HF_SEEDED_SAMPLING=one-by-one``: each sample alone under ``torch.manual_seed``), in any
batch, order or company, and the request cache must read those texts back.
"""

from __future__ import annotations

import pytest
import torch

import belief_tasks
from belief_tasks.tasks import belief_icl as B

belief_tasks.install()  # our backends and hooks

from belief_tasks.hooks import harness  # noqa: E402
from belief_tasks.hooks import hf_sampling as S  # noqa: E402

PROMPTS = [
    "Q: What is the capital of France?\nA:",
    "Hamlet was written by",
    "Q: Which instrument does Miles Davis play? Answer in one word.\nA:",
]
GREEDY = {"until": ["\n"], "do_sample": False, "max_gen_toks": 10}
K = 4


def sample_args(prompts=PROMPTS, k: int = K, base: int = 7000) -> list[tuple]:
    """BELIEF's sampled requests: its own kwargs (tagged stop string, seed) for sample i of prompt j."""
    return [(p, B.sampling_kwargs(GREEDY, i, base + 100 * j + i)) for j, p in enumerate(prompts) for i in range(k)]


OUR_TASK = "belief_test_seeded_sampling"
harness.OUR_TASKS.add(OUR_TASK)  # as BeliefTask adds its name: the seeded path serves requests of our tasks only


def instances(args: list[tuple]) -> list:
    from lm_eval.api.instance import Instance

    # a task of ours: the cache reads back seeded samples of our tasks only (harness.OUR_TASKS)
    return [Instance("generate_until", {}, a, k, metadata=(OUR_TASK, k, 1)) for k, a in enumerate(args)]


# --- warpers: what HF would have applied when sampling ------------------------------------------------


def tiny_causal_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize(
    "knobs",
    [
        {"temperature": 1.0, "top_k": 0, "top_p": 1.0},  # BELIEF's: no warper at all
        {"temperature": 0.7},  # HF's default top_k (50) applies under it
        {"temperature": 0.5, "top_k": 5, "top_p": 0.9},
        {"temperature": 1.3, "top_k": 0, "min_p": 0.05},
        {"top_k": 0, "typical_p": 0.8},
        {"top_k": 0, "epsilon_cutoff": 0.01, "eta_cutoff": 0.02},
    ],
)
def test_sampling_warpers_are_the_ones_transformers_samples_with(knobs):
    model = tiny_causal_lm()
    cfg = S.sampling_config(model, knobs)
    greedy_cfg = S.sampling_config(model, knobs)
    greedy_cfg.do_sample = False
    theirs = model._get_logits_processor(generation_config=cfg, device="cpu")
    not_warpers = model._get_logits_processor(generation_config=greedy_cfg, device="cpu")
    from transformers import LogitsProcessorList

    theirs = LogitsProcessorList(theirs[len(not_warpers) :])  # appended after those greedy decoding uses too
    ours = S.sampling_warpers(cfg)
    assert [type(w) for w in ours] == [type(w) for w in theirs]
    if knobs == {"temperature": 1.0, "top_k": 0, "top_p": 1.0}:
        assert len(ours) == 0
    ids = torch.zeros(3, 4, dtype=torch.long)
    scores = torch.randn(3, 64, generator=torch.Generator().manual_seed(1)) * 3
    assert torch.equal(ours(ids, scores.clone()), theirs(ids, scores.clone()))


def test_the_sampler_draws_what_hf_draws_under_the_seed_of_each_row():
    """Row r's token: torch.multinomial on its own (1, V) probabilities with a generator seeded
    with its seed, which is HF's draw for a batch of one under torch.manual_seed(seed)."""
    scores = torch.randn(3, 50, generator=torch.Generator().manual_seed(2))
    scores[2] = scores[0]
    seeds = [11, 2**40 + 3, 11]
    sampler = S.SeededRowSampler(seeds, S.sampling_warpers(S.sampling_config(tiny_causal_lm(), {"top_k": 0})), "cpu")
    for _ in range(3):  # three steps: each row's stream goes on where it was
        out = sampler(torch.zeros(3, 1, dtype=torch.long), scores.clone())
        assert torch.isinf(out).sum(dim=1).tolist() == [49, 49, 49]
        drawn = out.argmax(dim=1).tolist()
        assert drawn[0] == drawn[2]  # same seed and scores, same draw, whatever the row
    for r, seed in enumerate(seeds):
        torch.manual_seed(seed)
        expected = [int(torch.multinomial(torch.softmax(scores[r : r + 1], -1), 1)) for _ in range(3)]
        g = S.SeededRowSampler([seed], S.sampling_warpers(S.sampling_config(tiny_causal_lm(), {"top_k": 0})), "cpu")
        got = [int(g(torch.zeros(1, 1, dtype=torch.long), scores[r : r + 1].clone()).argmax()) for _ in range(3)]
        assert got == expected


# --- the bundled model -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lm(model_path, one_torch_thread):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(model_path), device="cpu", dtype="float32", batch_size=8)


def run(lm, args: list[tuple], monkeypatch=None, *, batch_size: int | None = None, one_by_one: bool = False):
    """Texts of ``args`` on ``lm`` and the number of ``model.generate`` calls they took."""
    mp = monkeypatch or pytest.MonkeyPatch()
    calls = []
    generate = lm.model.generate
    mp.setattr(lm.model, "generate", lambda *a, **kw: calls.append(1) or generate(*a, **kw))
    if batch_size is not None:
        mp.setattr(lm, "batch_size_per_gpu", batch_size)
    if one_by_one:
        mp.setenv(S.SWITCH, S.ONE_BY_ONE)
    else:
        mp.delenv(S.SWITCH, raising=False)
    try:
        return lm.generate_until(instances(args), disable_tqdm=True), len(calls)
    finally:
        if monkeypatch is None:
            mp.undo()


@pytest.mark.e2e
def test_batched_samples_equal_the_one_request_path(lm, monkeypatch):
    args = sample_args() + [(p, dict(GREEDY)) for p in PROMPTS]
    old, old_calls = run(lm, args, monkeypatch, one_by_one=True)
    new, new_calls = run(lm, args, monkeypatch)
    assert new == old  # every text, seeded samples and greedy answers
    assert old_calls == len(PROMPTS) * K + 1  # one generate per sample, one for the three greedy requests
    # the greedy batch; 12 samples at batch 8: batches of 8 and 4, a round ending when half its rows
    # are done: at most 4 (8, 4, 2, 1 rows) and 3 rounds
    assert new_calls <= 1 + 4 + 3
    assert len(set(new[: len(PROMPTS) * K])) > len(PROMPTS)  # samples differ


@pytest.mark.e2e
def test_a_sample_does_not_depend_on_batch_order_or_company(lm, monkeypatch):
    args = sample_args()
    ref, _ = run(lm, args, monkeypatch)
    # batch 3: batches mix prompts of different lengths (left padding, two distinct prompts)
    rev, _ = run(lm, args[::-1], monkeypatch, batch_size=3)
    assert rev == ref[::-1]
    alone = [run(lm, [a], monkeypatch, batch_size=1)[0][0] for a in args[::5]]
    assert alone == ref[::5]
    # among other prompts' samples and other seeds of the same prompt
    others = sample_args(["The Eiffel Tower is in", PROMPTS[1]], k=3, base=9000)
    mixed, _ = run(lm, others[:3] + args + others[3:], monkeypatch, batch_size=5)
    assert mixed[3 : 3 + len(args)] == ref


@pytest.mark.e2e
def test_batch_size_auto_is_detected_once_per_call(lm, monkeypatch):
    """As stock generate_until: one detection per call (under several processes it gathers over
    ranks, so every rank must detect once whatever its mix of requests); both paths use it."""
    args = sample_args(k=2) + [(p, dict(GREEDY)) for p in PROMPTS]
    ref, _ = run(lm, args, monkeypatch)
    detections = []
    monkeypatch.setattr(lm, "batch_size_per_gpu", "auto")
    monkeypatch.setattr(lm, "_detect_batch_size", lambda *a, **kw: detections.append(1) or 5)
    texts, calls = run(lm, args, monkeypatch)
    assert texts == ref and detections == [1] and lm.batch_size == "auto"
    assert calls <= 1 + 3 + 1  # the greedy batch; 6 samples in batches of 5 (at most 3 rounds: 5, 2, 1) and 1


@pytest.mark.e2e
def test_requests_the_batched_path_does_not_take(lm, monkeypatch):
    seeded = sample_args(k=1)[0]
    assert S.batchable(lm, seeded)
    assert not S.batchable(lm, (seeded[0], {**seeded[1], "repetition_penalty": 1.2}))  # not a warper: old path
    assert not S.batchable(lm, (seeded[0], {k: v for k, v in seeded[1].items() if k != "seed"}))  # unseeded: stock
    assert not S.batchable(lm, (seeded[0], GREEDY))
    monkeypatch.setenv(S.SWITCH, S.ONE_BY_ONE)
    assert not S.batchable(lm, seeded)
    monkeypatch.delenv(S.SWITCH)
    # the old path still serves a seeded request with other kwargs, seeded as before
    extra = (seeded[0], {**seeded[1], "repetition_penalty": 1.2})
    (a,), calls = run(lm, [extra], monkeypatch)
    (b,), _ = run(lm, [extra], monkeypatch)
    assert a == b and calls == 1


@pytest.mark.e2e
def test_seeded_samples_are_cached_as_they_are_decoded_and_read_back(lm, monkeypatch, tmp_path):
    """Under --use_cache (lm-eval's CachingLM, which never reads a sample back) the seeded samples of our
    tasks are read back by our generate_until (harness.read_through): a resumed run decodes nothing."""
    from lm_eval.api.model import CacheHook, CachingLM, hash_args

    args = sample_args(k=2) + [(PROMPTS[0], dict(GREEDY))]
    db = str(tmp_path / "cache_rank0.db")
    try:
        first = CachingLM(lm, db)  # sets lm's cache hook: our path writes each text as it is decoded
        texts, calls = run(lm, args, monkeypatch)  # straight to the model, as CachingLM hands it samples
        assert calls > 0
        assert [first.dbdict[hash_args("generate_until", a)] for a in args] == texts

        again = CachingLM(lm, db)  # a resumed run: lm-eval reads the greedy answer, our generate_until the samples
        generate = lm.model.generate
        decoded = []
        monkeypatch.setattr(lm.model, "generate", lambda *a, **kw: decoded.append(1) or generate(*a, **kw))
        assert again.generate_until(instances(args)) == texts
        assert decoded == []  # not one generate call: everything read back
    finally:
        lm.set_cache_hook(CacheHook(None))  # detach the module-scoped model from this test's database


@pytest.mark.e2e
def test_a_request_not_ours_reaches_stock_hf_unchanged(lm, monkeypatch):
    """A sample of a task that is not ours carrying a ``seed``: our generate_until hands it to lm-eval's own
    (``HFLM.generate_until.__wrapped__``) as it came, alone or beside seeded samples of ours. What reaches
    ``_model_generate`` (recorded; it answers with the context's last two tokens) and the text are those of
    lm-eval alone, the ``seed`` kwarg included (stock transformers would refuse it, as under lm-eval alone)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    kwargs = {**GREEDY, "do_sample": True, "temperature": 1.0, "seed": 7}
    theirs = Instance("generate_until", {}, (PROMPTS[1], kwargs), 0, metadata=("someone_elses_task", 0, 1))
    seen = []

    def record(context, max_length, stop, **kw):
        seen.append(
            (
                context.tolist(),
                max_length,
                list(stop),
                {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in kw.items()},
            )
        )
        return torch.cat([context, context[:, -2:]], dim=1)

    monkeypatch.setattr(lm, "_model_generate", record)
    alone = HFLM.generate_until.__wrapped__(lm, [theirs], disable_tqdm=True)
    lm_eval_saw = list(seen)
    assert lm_eval_saw[0][3]["seed"] == 7 and lm_eval_saw[0][3]["do_sample"] is True
    seen.clear()
    assert lm.generate_until([theirs], disable_tqdm=True) == alone
    assert seen == lm_eval_saw
    seen.clear()
    ours = instances(sample_args(k=2)[:2])  # decoded by our sampler, which calls model.generate itself
    texts = lm.generate_until([theirs, *ours], disable_tqdm=True)
    assert texts[0] == alone[0] and seen == lm_eval_saw
    assert theirs.args[1] == kwargs and "seed" in theirs.args[1]  # the request itself untouched
