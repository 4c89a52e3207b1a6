"""Shared fixtures. No path tricks: ``python -m pytest`` from the checkout root imports the
checkout's ``belief_tasks`` exactly as ``python -m belief_tasks`` does for a user there, and the
same folder is what the wheel installs (``tests/test_packaging.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: one intra-op thread per worker (see one_torch_thread), for
    os.environ["OMP_NUM_THREADS"] = "1"  # this process's torch and every subprocess it starts


@pytest.fixture(scope="session", autouse=True)
def one_thread_per_worker():
    """Under ``pytest -n N`` (the README's test line) N workers share the cores: each runs torch on one thread, as
    the ``one_torch_thread`` fixture does for one module, or the cores are oversubscribed."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session", autouse=True)
def rates_of_the_tests(tmp_path_factory):
    """The rates our runs store (``planning.rates``: each ``belief-eval`` run's measured times, which the next
    estimate reads) go to the session's own file, not the user's ``~/.cache/belief_tasks/rates.json``: a test's
    tiny runs would otherwise become the user's machine's rates. Tests of the rates set their own file."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BELIEF_RATES", str(tmp_path_factory.mktemp("rates") / "rates.json"))
        yield


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real datasets in ../shared/data; skipped where absent (a user's machine)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not available: {SHARED_DATA} is absent (it exists only in the project's CI)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The bundled default model (created by the README's setup command)."""
    from belief_tasks.commands.default_model import default_model_path, is_ready

    path = default_model_path()
    if not is_ready(path):
        pytest.fail(f"default model missing at {path}: run the README's setup (python -m belief_tasks fetch-model)")
    return path


@pytest.fixture(scope="session")
def tiny_model_path(model_path, tmp_path_factory) -> Path:
    """A random model with the bundled model's tokenizer and a tiny body (``scripts/random_model.py --shape tiny``,
    seed 0): for tests that compare runs with each other (batch sizes, processes, shards, a kill and its resume),
    where the weights do not matter and the bundled model's forward passes were most of the time. Its weights'
    std is wide enough that greedy answers differ from prompt to prompt and BEAR's top options lie tenths of a nat
    apart, far above float noise; what a model knows is read only off the bundled one."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("tiny_model") / "SmolLM2-tiny-random"  # the folder's name is the model's in reports
    script = ROOT / "scripts" / "random_model.py"
    args = ["--source", str(model_path), "--out", str(out), "--shape", "tiny", "--initializer_range", "0.2"]
    subprocess.run([sys.executable, str(script), *args], check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module's in-process runs: on a busy 2-core machine torch's default
    pool oversubscribes the cores and a forward pass becomes ~30x slower (measured); subprocess
    runs set OMP_NUM_THREADS=1. Use with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def lm_eval_logs_reach_caplog():
    """An in-process ``simple_evaluate(verbosity=...)`` runs lm-eval's ``setup_logging``, which sets
    the ``lm_eval`` logger's level and stops it propagating, so after such a test ``caplog`` sees no
    lm-eval record: a test's outcome would depend on which tests ran before it in the same process.
    Each test starts with the logger as a fresh process has it (its own handler is kept)."""
    import logging

    logger = logging.getLogger("lm_eval")
    before = logger.level, logger.propagate
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    yield
    logger.setLevel(before[0])
    logger.propagate = before[1]
