"""``vllm-shared`` (lm-eval's ``vllm`` whose log-likelihoods read vLLM's prefix cache) on every family, against
lm-eval's ``vllm`` on the same requests (``conftest.vllm_runs``) and ``hf``; its counts in the results JSON
against the passes' arithmetic; and the case the cache would get wrong (a read that covers the position
before a continuation), recomputed."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from engine_runs import (
    ENGINE_ARGS,
    FAMILIES,
    LL_TOL,
    assert_matches_hf,
    assert_same_as_vllm,
    boundary_requests,
    require_vllm,
    run_family,
    set_cpu_env,
)

require_vllm()


@pytest.fixture(scope="module")
def shared_lm(model_path, vllm_runs):  # vllm_runs first: its engine is stopped before this one starts
    set_cpu_env(in_process=True)
    from belief_tasks.backends.vllm_shared import VLLMSharedPrefixLM

    lm = VLLMSharedPrefixLM(pretrained=str(model_path), batch_size="auto", **ENGINE_ARGS)
    yield lm
    lm.model.llm_engine.engine_core.shutdown()


@pytest.fixture(scope="module")
def shared_runs(shared_lm, model_path) -> dict:
    """Every family; under ``"counts"`` the backend's counts of each run (what it added to the totals)."""
    runs, counts = {}, {}
    for family in FAMILIES:
        before = asdict(shared_lm.cache_counts)
        runs[family] = run_family(shared_lm, family, model_path)
        counts[family] = {k: v - before[k] for k, v in asdict(shared_lm.cache_counts).items() if k != "block_size"}
    runs["counts"] = counts
    return runs


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_matches_vllm_and_hf(family, shared_runs, vllm_runs, hf_runs):
    """The same numbers as lm-eval's ``vllm`` (equal bits: the rows are the engine's own, computed for each
    request), and so within tolerance of ``hf``."""
    gap = assert_same_as_vllm("vllm-shared", family, shared_runs[family], vllm_runs[family])
    assert gap == 0.0  # measured: every log-likelihood bit-identical to lm-eval's vllm
    assert_matches_hf("vllm-shared", family, shared_runs[family], hf_runs[family])


def test_counts_are_in_the_results_json_and_match_the_arithmetic(shared_runs, shared_lm):
    """The counts are in the results JSON (``config.vllm_shared``, cumulative over the backend's life), and the
    engine computes what ``prefix_cache_plan.simulate`` predicts from the requests' tokens (the arithmetic behind the
    16-token projection): IC-LKE's requests again, on an emptied cache, a fraction of what lm-eval's vllm prefills."""
    from belief_tasks.backends.prefix_cache_plan import simulate
    from belief_tasks.requests import encode_request

    run = shared_runs["iclke"]
    assert run["config"]["vllm_shared"]["requests"] >= shared_runs["counts"]["iclke"]["requests"] >= 10
    args = [tuple(a) for s in run["samples"]["belief_demo_iclke"] for a in s["arguments"]]
    requests = [(None, *encode_request(shared_lm, c, t)) for c, t in args]
    shared_lm.model.reset_prefix_cache()
    before = asdict(shared_lm.cache_counts)
    shared_lm._loglikelihood_tokens(requests, disable_tqdm=True)
    counts = {k: v - before[k] for k, v in asdict(shared_lm.cache_counts).items() if k != "block_size"}
    predicted = simulate([c + t for _, c, t in requests], [len(c) for _, c, _ in requests], 32)
    print(f"\nIC-LKE on vllm-shared: {counts}; predicted {predicted}")
    assert counts["requests"] == counts["cache_reads"] == len(args)
    assert (counts["computed_tokens"], counts["recomputed"]) == (predicted.computed_tokens, predicted.recomputed)
    # KNOBS' 10 examples and 20 options: 521 of 1,129 tokens computed (the demo's 50 and up to 100: under a fifth)
    assert counts["computed_tokens"] * 2 < counts["prompt_tokens"]


def test_per_token_route_of_monitor_runs(shared_lm, model_path, vllm_runs):
    """MONITOR's ``per_token`` route (``per_token_loglikelihood``, which lm-eval's ``vllm`` lacks) is served by
    the same passes: its metrics equal those of the ``prefix`` route on lm-eval's ``vllm`` (but the cost metrics,
    which count each route's own requests and tokens), greedy texts too."""
    from engine_runs import metric_gaps, requests_of

    run = run_family(shared_lm, "monitor", model_path, knobs={"monitor_route": "per_token"})
    reference = vllm_runs["monitor"]
    gaps = metric_gaps(run, reference, skip=("cost_",))
    greedy = [sorted(v[1] for v in requests_of(r).values() if v[0] == "greedy") for r in (run, reference)]
    print(f"\nvllm-shared per_token vs vllm prefix route: max metric gap {max(gaps.values()):.2e}")
    assert gaps and all(g <= 1e-3 for g in gaps.values()), gaps
    assert greedy[0] and greedy[0] == greedy[1]


def test_a_read_that_covers_a_continuation_is_recomputed(shared_lm, monkeypatch):
    """Requests built to trip the cache (``engine_runs.boundary_requests``): a context of exactly two blocks, whose
    requests read up to their continuation (their first rows come from a first-token request), and a context of two
    blocks and 20 tokens whose options share their first 12 tokens (the second and third such option read the
    block the first wrote, past their context: recomputed). The counts say so, and every number equals lm-eval's
    own ``_loglikelihood_tokens`` on the same engine, bit for bit. Without the check of ``num_cached_tokens`` the
    numbers come out wrong or not at all: the rows a read skipped hold whatever the engine left there."""
    from lm_eval.models.vllm_causallms import VLLM

    from belief_tasks.backends import prefix_cache_plan

    shared_lm.model.reset_prefix_cache()  # nothing from the family runs: only these requests' blocks
    block = shared_lm.model.llm_engine.vllm_config.cache_config.block_size
    assert block == 32  # vllm-shared's CPU default
    requests, expected = boundary_requests(shared_lm, "Madrid is the capital of Spain. ", block)
    before = asdict(shared_lm.cache_counts)
    ours = shared_lm._loglikelihood_tokens(requests, disable_tqdm=True)
    reference = VLLM._loglikelihood_tokens(shared_lm, requests, disable_tqdm=True)
    got = {k: v - before[k] for k, v in asdict(shared_lm.cache_counts).items() if k in expected}
    print(f"\nboundary requests on vllm-shared: {got}")
    assert got == expected
    assert max(abs(a - b) for (a, _), (b, _) in zip(ours, reference)) <= LL_TOL
    assert ours == reference  # equal bits, is_greedy flags included

    monkeypatch.setattr(prefix_cache_plan, "covered_continuation", lambda n, ctxlen: False)
    shared_lm.model.reset_prefix_cache()
    try:
        unchecked = shared_lm._loglikelihood_tokens(requests, disable_tqdm=True)
    except (TypeError, KeyError):  # a skipped row without the continuation's token: no number at all
        return
    assert unchecked != reference


def test_a_numeric_batch_size_hands_the_answers_over_call_by_call(shared_lm, shared_runs, monkeypatch):
    """With a numeric ``--batch_size`` each pass goes to the engine in calls of at most that many requests (as
    lm-eval's ``vllm`` cuts its own), and each call's answers reach the cache hook before the next call begins: a
    run killed mid-pass keeps every call that returned. The numbers are those of one call per pass (``auto``)."""
    from belief_tasks.requests import encode_request

    run = shared_runs["iclke"]
    args = [tuple(a) for s in run["samples"]["belief_demo_iclke"] for a in s["arguments"]]
    requests = [(a, *encode_request(shared_lm, *a)) for a in args]
    shared_lm.model.reset_prefix_cache()
    whole = shared_lm._loglikelihood_tokens(requests, disable_tqdm=True)

    handed: list = []
    calls: list[tuple[int, int]] = []  # (requests in the call, answers handed over before it)
    generate = shared_lm.model.generate

    def counted(prompts, params, *a, **kw):
        if not isinstance(params, list):  # the passes' calls (first-token requests carry a list of params)
            calls.append((len(prompts), len(handed)))
        return generate(prompts, params, *a, **kw)

    class Hook:
        def add_partial(self, attr, req, res):
            handed.append((attr, req, res))

    monkeypatch.setattr(shared_lm.model, "generate", counted)
    monkeypatch.setattr(shared_lm, "cache_hook", Hook())
    monkeypatch.setattr(shared_lm, "batch_size", 7)
    shared_lm.model.reset_prefix_cache()
    cut = shared_lm._loglikelihood_tokens(requests, disable_tqdm=True)
    print(f"\n{len(requests)} requests in {len(calls)} engine calls of at most 7")
    assert cut == whole  # equal bits, is_greedy flags included
    assert len(calls) >= len(requests) // 7 and max(n for n, _ in calls) <= 7
    assert [before for _, before in calls] == sorted(before for _, before in calls) and calls[-1][1] > len(args) // 2
    assert sorted(map(repr, handed)) == sorted(repr(("loglikelihood", a, r)) for a, r in zip(args, cut))
