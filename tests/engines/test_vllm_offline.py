"""Every family on lm-eval's ``vllm`` backend (vLLM's offline engine, the CPU build), one engine start
for the session (``conftest.vllm_runs``), compared request by request with ``hf`` on the same requests."""

from __future__ import annotations

import pytest

from engine_runs import FAMILIES, SAMPLED, assert_matches_hf, require_vllm, sampled_texts

require_vllm()


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_runs_and_matches_hf(family, vllm_runs, hf_runs):
    assert_matches_hf("vllm", family, vllm_runs[family], hf_runs[family])


@pytest.mark.parametrize("family", SAMPLED)
def test_seeded_samples_repeat(family, vllm_runs):
    """A second run on the same engine gives the same sampled texts: each request's own seed fixes it."""
    again = sampled_texts(vllm_runs["again"][family])
    first = sampled_texts(vllm_runs[family])
    assert first and again == first
    assert len(set(first)) > 1  # K distinct draws, not one text repeated


@pytest.mark.parametrize(
    "model, model_args",
    [
        ("vllm", "pretrained={path},enforce_eager=True"),
        ("vllm-shared", "pretrained={path},enforce_eager=True"),
        ("local-completions", "model=smol,base_url=http://127.0.0.1:9/v1/completions,tokenizer={path}"),
    ],
)
def test_masked_lm_tasks_are_refused(model, model_args, model_path):
    """``belief_mlm_*`` sends our own ``mask_topk`` requests, which only ``hf-mlm`` serves: on these
    engines ``belief-eval`` refuses before it starts an engine or calls a server (no server listens here)."""
    from harness import run_cli

    r = run_cli(
        [
            "--model",
            model,
            "--model_args",
            model_args.format(path=model_path),
            "--tasks",
            "belief_mlm_bear",
            "--metadata",
            '{"source": "sample"}',
            "--limit",
            "1",
        ],
        timeout=300,
        VLLM_CPU_KVCACHE_SPACE="1",  # the CPU settings (else the engine's memory fraction is refused first)
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "masked LM" in r.stderr and "--model hf-mlm" in r.stderr and "Traceback" not in r.stderr
