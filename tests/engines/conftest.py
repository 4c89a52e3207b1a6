"""The references every engine is compared with, run once per test session: lm-eval's ``hf`` and lm-eval's
``vllm`` (its offline engine) on the same families and limits (in the vLLM environment, whose transformers is
older than the main one's: the comparison is between engines run side by side, not against stored numbers)."""

from __future__ import annotations

import os

import pytest

# One OpenMP thread for the whole session (engine_runs.VLLM_CPU_ENV), set before torch is first imported (vLLM's
# import at collection): an engine core in this process (engine_runs.IN_PROCESS) keeps torch's thread count from
# then on (vLLM's CPU worker turns torch.set_num_threads into a no-op), and two threads on a busy 2-core machine
# wait on each other.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from engine_runs import ENGINE_ARGS, FAMILIES, SAMPLED, run_family, set_cpu_env


@pytest.fixture(scope="session")
def hf_runs(model_path) -> dict:
    import torch
    from lm_eval.models.huggingface import HFLM

    torch.set_num_threads(1)  # a busy 2-core machine: one intra-op thread (tests/conftest.py, one_torch_thread)
    lm = HFLM(pretrained=str(model_path), dtype="float32", device="cpu", batch_size=8)
    runs = {family: run_family(lm, family, model_path) for family in FAMILIES}
    del lm
    return runs


@pytest.fixture(scope="session")
def vllm_runs(model_path) -> dict:
    """Every family on lm-eval's ``vllm`` (one engine, stopped once its runs are done, before another module
    starts one), and under ``"again"`` the sampled families run a second time on the same engine."""
    set_cpu_env(in_process=True)
    from lm_eval.models.vllm_causallms import VLLM

    lm = VLLM(pretrained=str(model_path), batch_size="auto", **ENGINE_ARGS)
    try:
        runs = {family: run_family(lm, family, model_path) for family in FAMILIES}
        runs["again"] = {family: run_family(lm, family, model_path) for family in SAMPLED}
    finally:
        lm.model.llm_engine.engine_core.shutdown()  # the engine's own process
    return runs
