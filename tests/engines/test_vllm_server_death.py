"""A ``vllm serve`` that dies mid-run costs only the requests in flight (docs/scale.md, "Interruptions").

``vllm-serve-shared`` hands each answer to the cache as the server returns it (``prefix_cache_plan.run_passes``'
``done``), and the cache is written a second at a time (``hooks/answer_store.py``). Here, as a user meets it: the
demo's IC-LKE on 4 relations against a real ``vllm serve`` (the documented flags), the server's process group
killed (SIGKILL) once the default cache holds half the answers. The client ends within a minute with our
paragraph. The server comes back on another port (a scheduler's new one) and the same command, pointed there, runs
again: the cache is the same (its identity is the model the server serves, not its address), nothing kept is
asked again (lm-eval's count and ours), and the records and metrics equal those of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_scale_resume import LINE, assert_resumed_equals
from test_scale_runs import cache_rows
from test_vllm_server import SERVED_NAME, _free_port, _serve_args

from engine_runs import require_vllm, serving
from harness import ROOT, env_with_checkout

require_vllm()

TASK = "belief_demo_iclke"
START = 900  # s: two starts of vllm serve in one test, on a shared machine
METADATA = {"source": "sample", "relations": "P36,P37,P17,P1303"}


def server_args(model_path: Path, port: int) -> list[str]:
    """The engine tests' ``vllm serve``; room for every first-token request's ids (a default server's
    ``--max-logprobs`` is 20, and the demo has a block-aligned context with more options: issue 46, item 1)."""
    return [*_serve_args(model_path, port), "--max-logprobs", "128"]


def command(model_path: Path, port: int, out: Path) -> list[str]:
    model_args = (
        f"model={SERVED_NAME},base_url=http://127.0.0.1:{port}/v1/completions,tokenizer={model_path},"
        "tokenizer_backend=huggingface,num_concurrent=4"
    )
    return [
        sys.executable,
        "-m",
        "belief_tasks.commands.belief_eval",
        "--model",
        "vllm-serve-shared",
        "--model_args",
        model_args,
        "--tasks",
        TASK,
        "--metadata",
        json.dumps(METADATA),
        "--output_path",
        str(out),
        "--log_samples",
    ]


def run(cmd: list[str]) -> str:
    env = env_with_checkout(OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=str(ROOT), env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout + proc.stderr


def the_cache(out: Path) -> Path:
    (db,) = (out / "cache").glob("*_rank0.db")
    return db


def counts(log: str, out: Path) -> tuple[tuple[int, int], tuple[int, int], int]:
    """What a run computed: the probe's read of the cache (ours: cached, remaining), lm-eval's count (cached,
    remaining), and the requests our backend sent to the server (its count in the results JSON)."""
    lines = LINE.findall(log)
    (probe,) = [(int(c), int(r)) for c, r, kind in lines if kind == "loglikelihood"]
    (lm_eval,) = [(int(c), int(r)) for c, r, kind in lines if not kind]
    results = json.loads(sorted(out.rglob("results_*.json"))[-1].read_text())
    return probe, lm_eval, results["config"]["vllm_shared"]["requests"]


def kill_server_halfway(cmd: list[str], out: Path, server: subprocess.Popen, half: int) -> tuple[int, float, str]:
    """Run ``cmd``; SIGKILL ``server``'s process group once the default cache holds ``half`` answers. Returns the
    client's exit status, the seconds it took to end after the kill, and what it printed."""
    client = subprocess.Popen(
        cmd,
        cwd=str(ROOT),
        env=env_with_checkout(OMP_NUM_THREADS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 1200
        while client.poll() is None and time.monotonic() < deadline:
            db = next((out / "cache").glob("*_rank0.db"), None)
            if db is not None and cache_rows(db) >= half:
                break
            time.sleep(0.05)
        assert client.poll() is None, "the run ended before the kill"
        os.killpg(server.pid, signal.SIGKILL)  # the server's whole process group: its engine too
        killed = time.monotonic()
        printed, _ = client.communicate(timeout=300)
        return client.returncode, time.monotonic() - killed, printed
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
            client.wait()


def test_a_server_s_death_costs_only_the_requests_in_flight(model_path, tmp_path):
    first, second = _free_port(), _free_port()
    ref, out = tmp_path / "uninterrupted", tmp_path / "killed"
    with serving(server_args(model_path, first), first, tmp_path / "first.log", START) as server:
        log = run(command(model_path, first, ref))
        total = cache_rows(the_cache(ref))
        assert counts(log, ref) == ((0, 1), (1, total - 1), total) and total > 100  # each answer computed once
        status, seconds, printed = kill_server_halfway(command(model_path, first, out), out, server, total // 2)
    print(f"\nclient ended {seconds:.1f} s after the server's death, status {status}")
    assert status == 1 and seconds < 60, printed[-3000:]
    assert "belief-eval: the backend failed during the run" in printed and "is kept" in printed, printed[-3000:]
    assert not list(out.rglob("results_*.json"))
    kept = cache_rows(the_cache(out))
    print(f"{kept} of {total} answers kept")
    assert total // 2 <= kept < total

    with serving(server_args(model_path, second), second, tmp_path / "again.log", START):  # back, on another port
        log = run(command(model_path, second, out))
    assert list((out / "cache").glob("*_rank0.db")) == [the_cache(out)]  # the same cache, no second one
    # nothing kept is asked again: the probe is one request not kept, lm-eval reads every kept one back, and the
    # backend sends the server only what was not kept
    assert counts(log, out) == ((0, 1), (kept + 1, total - kept - 1), total - kept)
    assert cache_rows(the_cache(out)) == total
    assert_resumed_equals(out, ref, exact=True)
