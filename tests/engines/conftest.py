"""The reference every engine is compared with: lm-eval's ``hf`` on the same families and limits,
run once per test session (in the vLLM environment, whose transformers is older than the main one's:
the comparison is between engines run side by side, not against stored numbers)."""

from __future__ import annotations

import pytest

from engine_runs import FAMILIES, run_family


@pytest.fixture(scope="session")
def hf_runs(model_path) -> dict:
    import torch
    from lm_eval.models.huggingface import HFLM

    torch.set_num_threads(1)  # a busy 2-core machine: one intra-op thread (tests/conftest.py, one_torch_thread)
    lm = HFLM(pretrained=str(model_path), dtype="float32", device="cpu", batch_size=8)
    runs = {family: run_family(lm, family, model_path) for family in FAMILIES}
    del lm
    return runs
