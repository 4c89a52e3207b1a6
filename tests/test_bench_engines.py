"""``python -m benchmarks engines``, the benchmark behind the README's engine timings: every hf arm runs every workload
(seeded BELIEF-ICL samples on stock ``hf`` included), and ``--count`` counts what each asks of the device.

A tiny random model (``scripts/random_model.py --shape tiny``) on a handful of requests: minutes, not the
benchmark's sizes. The vLLM arms: tests/engines/test_bench_engines_vllm.py (the vLLM environment)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: a handful of requests, but more than one stock batch per fact (stock hf at batch 8): a call smaller than one
#: stock batch takes stock one forward, and hf-shared two (the shared prefix first, then the rows on it)
SMALL = [
    "--facts",
    "2",
    "--options",
    "20",
    "--instances",
    "2",
    "--prompts",
    "2",
    "--samples",
    "3",
    "--monitor_limit",
    "1",
    "--hf_batch_size",
    "8",
]


@pytest.fixture(scope="module")
def bench(tiny_model_path, tmp_path_factory) -> tuple[str, dict]:
    """One sitting of both hf arms with ``--count``: its printed tables and its JSON."""
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "engines",
            "--arms",
            "hf,hf-shared",
            "--model",
            str(tiny_model_path),
            "--count",
            *SMALL,
            "--threads",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        env=env,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(out.read_text())


@pytest.mark.e2e
def test_hf_arms_run_every_workload_and_count_their_work(bench):
    stdout, result = bench
    rows = {(r["workload"].split(":")[0], r["arm"]): r for r in result["rows"]}
    assert set(rows) == {(w, a) for w in ("IC-LKE", "BEAR", "BELIEF-ICL", "MONITOR") for a in ("hf", "hf-shared")}
    for arm in ("hf", "hf-shared"):
        assert rows["IC-LKE", arm]["requests"] == 2 * 20 and rows["BELIEF-ICL", arm]["requests"] == 2 * (1 + 3)
    assert all(r["wall_s"] > 0 for r in rows.values())
    assert "greedy texts equal" in rows["BELIEF-ICL", "hf-shared"]["outputs_vs_hf"]
    # every workload made forwards, and read scores or tokens back to the host, on both arms
    for arm, runs in result["work"].items():
        for name, counts in runs[-1].items():
            assert all(c["forwards"] > 0 and c["host_reads"] > 0 for c in counts.values()), (arm, name, counts)
    assert "Work per request" in stdout and "| BELIEF-ICL" in stdout


@pytest.mark.e2e
def test_hf_shared_asks_no_more_of_the_device_than_hf(bench):
    """Issue 39's goal, counted: per workload, ``hf-shared`` makes no more forwards per request, and no more host
    reads per scored request and per generated token, than stock ``hf`` (``benchmarks.counting.summary``)."""
    from benchmarks.counting import summary

    work = {arm: runs[-1] for arm, runs in bench[1]["work"].items()}
    for name in work["hf"]:
        stock, shared = summary(work["hf"][name]), summary(work["hf-shared"][name])
        assert shared["forwards_per_request"] <= stock["forwards_per_request"], (name, stock, shared)
        for key in ("reads_per_scored_request", "reads_per_generated_token"):
            if stock[key] is not None:
                assert shared[key] <= stock[key], (name, key, stock, shared)


def test_count_refuses_an_arm_it_cannot_instrument():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "engines", "--arms", "hf,vllm", "--count"],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
        timeout=300,
    )
    assert done.returncode == 2 and "hf and hf-shared arms only" in done.stderr
