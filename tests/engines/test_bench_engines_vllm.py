"""``python -m benchmarks engines``'s vLLM arms run every workload, on a handful of requests (the hf arms:
tests/test_bench_engines.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine_runs import IN_PROCESS, VLLM_CPU_ENV, require_vllm

require_vllm()

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks import engines  # noqa: E402  (its module level needs neither torch nor vLLM)

SMALL = [
    "--facts",
    "1",
    "--options",
    "5",
    "--instances",
    "2",
    "--prompts",
    "2",
    "--samples",
    "3",
    "--monitor_limit",
    "1",
]


@pytest.mark.parametrize("arm", [a for a in engines.ARMS if a.startswith("vllm")])
def test_vllm_arm_runs_every_workload(arm, model_path, tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, **VLLM_CPU_ENV, **IN_PROCESS}  # the engine core in the arm's process (engine_runs.IN_PROCESS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "engines",
            "--arms",
            arm,
            "--vllm_python",
            sys.executable,
            "--hf_python",
            sys.executable,
            "--model",
            str(model_path),
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
    rows = {r["workload"].split(":")[0]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"IC-LKE", "BEAR", "BELIEF-ICL", "MONITOR"}
    assert rows["IC-LKE"]["requests"] == 5 and rows["BELIEF-ICL"]["requests"] == 2 * (1 + 3)
    assert all(r["wall_s"] > 0 and r["arm"] == arm for r in rows.values())
