"""Every family on lm-eval's ``local-completions`` against ``vllm serve`` on 127.0.0.1 (started and
stopped here, once for the module), compared request by request with ``hf`` on the same requests; and on
our ``vllm-serve-shared`` (log-likelihoods through the server's token endpoint, reading its prefix cache),
compared with ``local-completions`` on the same server."""

from __future__ import annotations

import socket
import sys

import pytest

from engine_runs import (
    ENGINE_ARGS,
    FAMILIES,
    SAMPLED,
    assert_matches_hf,
    assert_same_as_vllm,
    require_vllm,
    run_family,
    sampled_texts,
    serving,
)

require_vllm()

SERVED_NAME = "smol"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_args(model_path, port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        str(model_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
        "--dtype",
        ENGINE_ARGS["dtype"],
        "--max-model-len",
        str(ENGINE_ARGS["max_model_len"]),
        "--gpu-memory-utilization",
        str(ENGINE_ARGS["gpu_memory_utilization"]),
        "--enforce-eager",
        "--no-enable-chunked-prefill",
        # vllm-serve-shared's token endpoint and per-request cache hits; the CPU attention's smallest block
        "--enable-scale-out",
        "--enable-prompt-tokens-details",
        "--block-size",
        "32",
    ]


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    """``vllm serve`` of the bundled model; yields its completions URL; stopped at the module's end."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm_serve") / "server.log"
    with serving(_serve_args(model_path, port), port, log):
        yield f"http://127.0.0.1:{port}/v1/completions"


@pytest.fixture(scope="module")
def api_lm(server, model_path):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    # the model's own tokenizer: lm-eval splits context and continuation by tokens (MONITOR needs it too)
    return LocalCompletionsAPI(
        model=SERVED_NAME,
        base_url=server,
        tokenizer=str(model_path),
        tokenizer_backend="huggingface",
        num_concurrent=4,  # as vllm-serve-shared below: the server batches what arrives together
        max_retries=1,
        batch_size=16,
    )


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


@pytest.fixture(scope="module")
def served_shared_lm(server, model_path):
    from belief_tasks.backends.vllm_served import VLLMServedSharedLM

    return VLLMServedSharedLM(
        model=SERVED_NAME,
        base_url=server,
        tokenizer=str(model_path),
        tokenizer_backend="huggingface",
        num_concurrent=4,
        max_retries=1,
        batch_size=16,
    )


@pytest.fixture(scope="module")
def served_shared_runs(served_shared_lm, model_path) -> dict:
    from dataclasses import asdict

    runs, counts = {}, {}
    for family in FAMILIES:
        before = asdict(served_shared_lm.cache_counts)
        runs[family] = run_family(served_shared_lm, family, model_path)
        after = asdict(served_shared_lm.cache_counts)
        counts[family] = {k: v - before[k] for k, v in after.items() if k != "block_size"}
    runs["counts"] = counts
    return runs


@pytest.mark.parametrize("family", list(FAMILIES))
def test_served_shared_matches_local_completions(family, served_shared_runs, api_runs):
    """The same numbers as ``local-completions`` on the same server (bit for bit: the engine's own rows), the
    same greedy and sampled texts (generation is ``local-completions``' own)."""
    gap = assert_same_as_vllm("vllm-serve-shared", family, served_shared_runs[family], api_runs[family])
    assert gap == 0.0


def test_served_shared_reads_the_server_s_cache(served_shared_runs, served_shared_lm):
    """IC-LKE through the token endpoint: the counts are in the results JSON; the requests again, on contexts the
    server has not seen (an EOS token in front, which the demo never sends), read the cache, and the server computes
    what the passes' arithmetic predicts at its block size (read from its /metrics: 32); and the requests built to
    trip the cache are served by a first-token request or recomputed, with the bits of ``local-completions`` on the
    same requests."""
    from lm_eval.models.api_models import TemplateAPI

    from belief_tasks.backends.prefix_cache_plan import simulate
    from belief_tasks.requests import encode_request

    from engine_runs import boundary_requests

    run = served_shared_runs["iclke"]
    assert run["config"]["vllm_shared"]["requests"] >= served_shared_runs["counts"]["iclke"]["requests"] >= 10
    lm = served_shared_lm
    args = [tuple(a) for s in run["samples"]["belief_demo_iclke"] for a in s["arguments"]]
    requests = [(None, [lm.eot_token_id] + c, t) for c, t in (encode_request(lm, c, t) for c, t in args)]
    before = counts_of(lm)
    lm._loglikelihood_tokens(requests)
    counts = {k: v - before[k] for k, v in counts_of(lm).items()}
    predicted = simulate([c + t for _, c, t in requests], [len(c) for _, c, _ in requests], 32)
    print(f"\nIC-LKE on vllm-serve-shared: {counts}; predicted {predicted}")
    assert lm.cache_counts.block_size == 32
    assert counts["cache_reads"] == counts["requests"] == len(args)
    # a read sometimes answers 400 (docs/backends_support.md, "Served vLLM"): it is sent again (``retried``; the
    # try that failed cached the request's own blocks, so the next may read past its context and be recomputed),
    # and one that never passes is recomputed with its count unknown (each try counted whole); the others are
    # what the arithmetic predicts
    recomputed = counts["recomputed"] - counts["unknown"]
    assert predicted.recomputed <= recomputed <= predicted.recomputed + counts["retried"]
    if counts["unknown"] == counts["retried"] == 0:
        assert counts["computed_tokens"] == predicted.computed_tokens
    else:  # seen before retries: 630 against 541 predicted, with one unknown
        longest = max(len(c) + len(t) for _, c, t in requests)
        assert predicted.computed_tokens <= counts["computed_tokens"]
        extra = (counts["retried"] + 2 * counts["unknown"]) * longest
        assert counts["computed_tokens"] <= predicted.computed_tokens + extra
    assert predicted.computed_tokens < counts["prompt_tokens"] / 2  # the cache's reads save over half

    tripping, expected = boundary_requests(lm, "Lisbon is the capital of Portugal. ", 32)
    before = counts_of(lm)
    ours = lm._loglikelihood_tokens(tripping)
    reference = TemplateAPI._loglikelihood_tokens(lm, tripping)  # local-completions' own, on /v1/completions
    got = {k: v - before[k] for k, v in counts_of(lm).items() if k in expected or k in ("unknown", "retried")}
    print(f"boundary requests on vllm-serve-shared: {got}")
    unknown = got.pop("unknown")  # answered 400 at every try: recomputed, whatever the case built here would have met
    retried = got.pop("retried")  # a try that failed may move its request to another case
    got["recomputed"] -= unknown
    if unknown == retried == 0:
        assert got == expected
    else:  # each 400 takes one request out of its case: a first row, a recomputation or a plain read
        assert {k: v for k, v in got.items() if k not in ("first_rows", "recomputed")} == {
            k: v for k, v in expected.items() if k not in ("first_rows", "recomputed")
        }
        lost = (expected["first_rows"] - got["first_rows"]) + (expected["recomputed"] - got["recomputed"])
        assert got["first_rows"] <= expected["first_rows"] and got["recomputed"] <= expected["recomputed"] + retried
        assert -retried <= lost <= unknown + retried, (got, expected, unknown, retried)
    assert [ll for ll, _ in ours] == [ll for ll, _ in reference]  # equal bits


def counts_of(lm) -> dict:
    from dataclasses import asdict

    return {k: v for k, v in asdict(lm.cache_counts).items() if k != "block_size"}


def test_a_context_with_more_options_than_the_server_s_max_logprobs(served_shared_lm):
    """The server runs with vLLM's default ``--max-logprobs`` (20: the fixture sets none), and a context of exactly
    two blocks has 45 options, whose first rows one first-token request cannot ask for (vLLM refuses ``logprobs``
    above 20 with a 400). The backend reads the limit from the server and splits the ask: 3 first-token requests of
    at most 19 ids, every option's first row served by one of them, and the bits of ``local-completions`` on the same
    requests."""
    from lm_eval.models.api_models import TemplateAPI

    from engine_runs import many_options_requests

    lm = served_shared_lm
    assert lm._first_token_ids() == 19  # the default max_logprobs, 20, less the repeated id
    requests = many_options_requests(lm, "Vienna is the capital of Austria. ", 32, 45)
    before = counts_of(lm)
    ours = lm._loglikelihood_tokens(requests)
    reference = TemplateAPI._loglikelihood_tokens(lm, requests)  # local-completions' own, on /v1/completions
    got = {k: v - before[k] for k, v in counts_of(lm).items()}
    print(f"\n45 options on a 2-block context, on vllm-serve-shared: {got}")
    assert (got["requests"], got["first_token_requests"]) == (45, 3)
    assert got["first_rows"] + got["unknown"] == 45 and got["recomputed"] == got["unknown"]
    assert ours == reference  # equal bits, is_greedy flags included
