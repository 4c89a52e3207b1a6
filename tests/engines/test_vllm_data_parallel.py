"""Data parallel on vLLM's CPU engine: ``vllm-shared`` at ``data_parallel_size=2`` (two engines, each a Ray task
of its own) gives one engine's numbers. lm-eval's ``vllm`` cannot run so on a CPU (its Ray replicas ask for
``num_gpus=tensor_parallel_size``, which a CPU node does not have, and wait forever): docs/backends_support.md.

One ``simple_evaluate`` of IC-LKE and MONITOR at ``--limit 1``, so that each request type is one call, dispatched
once to the two engines (lm-eval starts both engines again for each call): the log-likelihoods (whole contexts to
each replica, each running the passes) and MONITOR's greedy answers. Compared request by request with lm-eval's
``vllm`` on one engine (``vllm_runs``, whose limits reach these documents)."""

from __future__ import annotations

import os

import pytest

from engine_runs import ENGINE_ARGS, FAMILIES, KNOBS, requests_of, require_vllm, set_cpu_env

require_vllm()
if os.environ.get("BELIEF_REQUIRE_VLLM") == "1":
    import ray  # noqa: F401  (CI: a missing Ray fails, scripts/setup_vllm.sh installs it)
else:
    pytest.importorskip("ray", reason="data parallel needs Ray: bash scripts/setup_vllm.sh installs it")


def test_two_engines_give_one_engine_s_numbers(model_path, vllm_runs):
    set_cpu_env(in_process=True)  # in each replica's Ray task too: Ray's workers inherit it
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    import belief_tasks
    from belief_tasks.backends.vllm_shared import VLLMSharedPrefixLM
    from belief_tasks.paths import task_yamls_dir

    belief_tasks.install()
    lm = VLLMSharedPrefixLM(pretrained=str(model_path), batch_size="auto", data_parallel_size=2, **ENGINE_ARGS)
    meta = {"source": "sample", **KNOBS["iclke"]}  # the knobs of vllm_runs' IC-LKE (MONITOR has none of its own)
    tm = TaskManager(
        include_path=str(task_yamls_dir()), include_defaults=False, metadata={"pretrained": str(model_path), **meta}
    )
    run = simple_evaluate(
        model=lm,
        tasks=[FAMILIES["iclke"][0], FAMILIES["monitor"][0]],
        task_manager=tm,
        limit=1,
        log_samples=True,
        metadata=meta,
        bootstrap_iters=0,
    )
    ours = requests_of(run)
    one = {**requests_of(vllm_runs["iclke"]), **requests_of(vllm_runs["monitor"])}
    kinds = {kind for kind, _ in ours.values()}
    ll = [abs(value - one[key][1]) for key, (kind, value) in ours.items() if kind == "loglikelihood"]
    greedy = [key for key, (kind, value) in ours.items() if kind == "greedy" and value != one[key][1]]
    print(
        f"\nvllm-shared on 2 engines vs vllm on one: {len(ll)} log-likelihoods, max gap {max(ll):.2e}; "
        f"{sum(k == 'greedy' for k, _ in ours.values())} greedy texts, {len(greedy)} differ; {lm.cache_counts}"
    )
    assert kinds == {"loglikelihood", "greedy"} and ours.keys() <= one.keys()
    assert max(ll) == 0.0 and greedy == []
    assert lm.cache_counts.requests == len(ll) and lm.cache_counts.cache_reads > 0
