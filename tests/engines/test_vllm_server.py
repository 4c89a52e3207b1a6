"""Every family on lm-eval's ``local-completions`` against ``vllm serve`` on 127.0.0.1 (started and
stopped here, once for the module), compared request by request with ``hf`` on the same requests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from engine_runs import (
    ENGINE_ARGS,
    FAMILIES,
    SAMPLED,
    assert_matches_hf,
    require_vllm,
    run_family,
    sampled_texts,
    set_cpu_env,
)

require_vllm()

SERVED_NAME = "smol"
START_TIMEOUT = 420  # s: vLLM's import and engine start on a busy 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_args(model_path, port: int) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model_path),
            "--host", "127.0.0.1", "--port", str(port), "--served-model-name", SERVED_NAME,
            "--dtype", ENGINE_ARGS["dtype"], "--max-model-len", str(ENGINE_ARGS["max_model_len"]),
            "--gpu-memory-utilization", str(ENGINE_ARGS["gpu_memory_utilization"]), "--enforce-eager",
            "--no-enable-chunked-prefill"]


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    """``vllm serve`` of the bundled model; yields its completions URL; stopped at the module's end."""
    set_cpu_env()
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm_serve") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(_serve_args(model_path, port), stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ),
                                start_new_session=True)  # its own process group: the engine's processes stop with it
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not answer /health within {START_TIMEOUT} s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1/completions"
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@pytest.fixture(scope="module")
def api_lm(server, model_path):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    # the model's own tokenizer: lm-eval splits context and continuation by tokens (MONITOR needs it too)
    return LocalCompletionsAPI(model=SERVED_NAME, base_url=server, tokenizer=str(model_path),
                               tokenizer_backend="huggingface", num_concurrent=1, max_retries=1, batch_size=16)


@pytest.fixture(scope="module")
def api_runs(api_lm, model_path) -> dict:
    return {family: run_family(api_lm, family, model_path) for family in FAMILIES}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_runs_and_matches_hf(family, api_runs, hf_runs):
    assert_matches_hf("vllm serve", family, api_runs[family], hf_runs[family])


@pytest.mark.parametrize("family", SAMPLED)
def test_seeded_samples_repeat(family, api_lm, api_runs, model_path):
    """A second run against the same server gives the same sampled texts (each request sends its
    own seed, below 2**63, which the server accepts)."""
    again = sampled_texts(run_family(api_lm, family, model_path))
    first = sampled_texts(api_runs[family])
    assert first and again == first
    assert len(set(first)) > 1
