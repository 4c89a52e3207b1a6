"""Scale and reliability of whole runs (issue 9): data parallelism, kill and resume, determinism.

All runs are the command a user types (``belief-eval`` or ``accelerate launch -m
belief_tasks.commands.belief_eval``) on the bundled model and sample, kept tiny:

* ``belief_bear`` on 2 facts of P1303 with one template: 2 docs x 42 options
  = 84 ``loglikelihood`` requests (corpus-level BEAR score over records);
* ``belief_mp_zeroshot`` on the same 2 facts, 4 prompts, greedy + 2 seeded samples for the one
  sampled prompt among them (corpus-level consistency, accuracy fluctuation, Ovconf and coverage over records).

The one-process run at batch size 1 is the reference every other run must equal. Runs compared with each other use
a tiny random model (the ``tiny_model_path`` fixture): the comparisons do not depend on the weights. The kill test
keeps the bundled model, whose forward passes are slow enough to kill a run between its answers.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from harness import ROOT, env_with_checkout

pytestmark = pytest.mark.e2e

TASKS = "belief_bear,belief_mp_zeroshot"
LIMIT = "4"  # per task: both BEAR docs, 4 BELIEF prompts
METADATA = {
    "source": "sample",
    "relations": "P1303",
    "max_facts_per_relation": 2,
    "templates": "0",
    "confidence_samples": 2,  # each sample carries its own seed: Ovconf must not depend on the layout
}
BEAR_REQUESTS = 84  # 2 docs x 42 answer options of P1303
TOL = 1e-4  # batch 1 vs 8: padding changes the matmul shapes, so float32 rounding moves a summed log-likelihood by
# up to ~5e-5 nats on some CPUs (python -m benchmarks float_noise; 4.6e-5 measured here on the pre-change code too); the
# predictions and generated texts stay identical (checked exactly below)


def command(
    model_path, out: Path, *, batch_size: int = 1, tasks: str = TASKS, extra: list[str] = (), model: str = "hf"
) -> list[str]:
    # only knobs some task of the command reads (belief-eval refuses the others)
    metadata = METADATA if "belief_mp" in tasks else {k: v for k, v in METADATA.items() if k != "confidence_samples"}
    return [
        "--model",
        model,
        "--model_args",
        f"pretrained={model_path},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        tasks,
        "--limit",
        LIMIT,
        "--metadata",
        json.dumps(metadata),
        "--batch_size",
        str(batch_size),
        "--output_path",
        str(out),
        "--log_samples",
        *extra,
    ]


def cli(args: list[str], launcher: list[str] | None = None, timeout: int = 900, **env) -> subprocess.CompletedProcess:
    cmd = [*(launcher or [sys.executable]), "-m", "belief_tasks.commands.belief_eval", *args]
    env = env_with_checkout(OMP_NUM_THREADS="1", **env)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_cpu(n: int) -> list[str]:
    """The launcher of docs/scale.md: n CPU processes (gloo) through lm-eval's own accelerate path."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(n),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
    ]


def load_run(out: Path) -> tuple[dict, dict]:
    """(results per task, {(task, doc_id): record}) of the run written under ``out``."""
    results = json.loads(sorted(out.rglob("results_*.json"))[-1].read_text())["results"]
    records = {}
    for f in out.rglob("samples_*.jsonl"):
        task = f.name[len("samples_") :].rsplit("_", 1)[0]
        for line in f.read_text().splitlines():
            s = json.loads(line)
            key = (task, s["doc_id"])
            assert key not in records, f"doc {key} logged twice"
            # resps: each request's response (every greedy and sampled text). Under several processes
            # lm-eval pads a rank's requests with copies of its last one, whose responses it appends
            # to that instance's list: its first entry is the instance's own.
            records[key] = {**s[s["metrics"][0]], "resps": [r[0] for r in s["resps"]]}
    return results, records


def metric_values(results: dict) -> dict:
    return {
        (t, k): v for t, r in results.items() for k, v in r.items() if isinstance(v, (int, float)) and k != "sample_len"
    }


def assert_same_metrics(a: dict, b: dict, tol: float = 0.0):
    va, vb = metric_values(a), metric_values(b)
    assert va.keys() == vb.keys()
    for key in va:
        x, y = va[key], vb[key]
        if isinstance(x, float) and math.isnan(x):
            assert isinstance(y, float) and math.isnan(y), (key, x, y)
        else:
            assert abs(x - y) <= tol, (key, x, y)


@pytest.fixture(scope="module")
def reference(tiny_model_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    cli(command(tiny_model_path, out))
    results, records = load_run(out)
    # the reference is a real run, not an empty one: every doc scored, BEAR options all there
    assert len([k for k in records if k[0] == "belief_bear"]) == 2
    assert len([k for k in records if k[0] == "belief_mp_zeroshot"]) == 2  # one document per pair
    # each pair's sampled prompt carries 2 samples, right after its greedy request, drawn with different seeds
    sampled = [
        r["resps"][r["sampled"] + 1 : r["sampled"] + 3]
        for (t, _), r in records.items()
        if t == "belief_mp_zeroshot" and r["n_samples"]
    ]
    assert len(sampled) == 2 and all(len(s) == 2 for s in sampled)
    assert len({x for s in sampled for x in s}) > 1
    assert all(
        len(r["ll"]) == 42 and all(x < 0 for x in r["ll"]) for (t, _), r in records.items() if t == "belief_bear"
    )
    return results, records


def test_same_command_twice_and_batch_sizes(tiny_model_path, reference, tmp_path):
    ref_results, ref_records = reference
    cli(command(tiny_model_path, tmp_path / "again"))
    again_results, again_records = load_run(tmp_path / "again")
    assert again_records == ref_records
    assert_same_metrics(again_results, ref_results)

    cli(command(tiny_model_path, tmp_path / "b8", batch_size=8))
    results, records = load_run(tmp_path / "b8")
    assert_close_records(records, ref_records, TOL)
    assert_same_metrics(results, ref_results, tol=TOL)


def assert_close_records(records: dict, ref_records: dict, tol: float) -> None:
    """Log-likelihoods within ``tol``, the same BEAR predictions, identical generated texts."""
    assert records.keys() == ref_records.keys()
    for key, rec in records.items():
        ref = ref_records[key]
        if key[0] == "belief_bear":
            assert max(abs(x - y) for x, y in zip(rec["ll"], ref["ll"], strict=True)) <= tol, key
            assert rec["pred"] == ref["pred"]
        else:
            assert rec["resps"] == ref["resps"], key  # identical greedy answers and seeded samples


def test_two_processes_give_the_numbers_of_one(tiny_model_path, tmp_path):
    """hf-shared under accelerate launch on CPU: each rank builds its own half of the documents and
    its own prefix trees over its requests, so log-likelihoods may differ by float noise (1e-4 nats,
    its bound against hf); texts, BELIEF's seeded samples included, and every prediction are
    identical, and the gathered records hold every document once. (Stock ``hf`` shards only on CUDA
    devices; we leave it so: docs/scale.md.)"""
    cli(command(tiny_model_path, tmp_path / "one", model="hf-shared"))
    proc = cli(
        command(tiny_model_path, tmp_path / "two", model="hf-shared"),
        launcher=accelerate_cpu(2),
        ACCELERATE_USE_CPU="1",
    )
    log = proc.stdout + proc.stderr
    # really sharded: each rank built its own half of the docs
    assert "Building contexts for belief_bear on rank 1" in log
    assert "Building contexts for belief_bear on rank 0" in log
    ref_results, ref_records = load_run(tmp_path / "one")
    results, records = load_run(tmp_path / "two")
    assert any(r.get("n_samples") for r in records.values())  # the sampled prompt is there
    assert_close_records(records, ref_records, 1e-4)
    assert_same_metrics(results, ref_results, tol=1e-4)


def cache_rows(db: Path) -> int:
    from belief_tasks.hooks.answer_cache import answers_held

    return answers_held(db)


def kill_once_cached(cmd: list[str], db: Callable[[], Path | None], rows: int, seconds: float, poll: float) -> None:
    """Start ``cmd`` (a ``belief-eval`` command line) and SIGKILL its process group once the cache file ``db()``
    names holds ``rows`` answers, or when it ends, or after ``seconds``."""
    proc = subprocess.Popen(
        cmd,
        env=env_with_checkout(OMP_NUM_THREADS="1"),
        cwd=str(ROOT),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + seconds
        while proc.poll() is None and time.time() < deadline:
            found = db()
            if found is not None and cache_rows(found) >= rows:
                break
            time.sleep(poll)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the process group we started, nothing else
        proc.wait()


def cached_line(log: str) -> tuple[int, int]:
    """lm-eval's own count: 'Cached requests: N, Requests remaining: M' for loglikelihood."""
    for line in log.splitlines():
        if "Cached requests:" in line:
            head, rest = line.split("Cached requests:", 1)
            cached, remaining = rest.split(", Requests remaining:")
            return int(cached), int(remaining.split()[0])
    raise AssertionError("no cache report in the log:\n" + log[-3000:])


def test_sigkill_then_resume_recomputes_nothing_finished(model_path, tmp_path):
    reference = tmp_path / "uninterrupted"
    cli(command(model_path, reference, tasks="belief_bear"))
    cache = tmp_path / "cache" / "run"
    db = Path(f"{cache}_rank0.db")
    args = command(model_path, tmp_path / "killed", tasks="belief_bear", extra=["--use_cache", str(cache)])
    kill_once_cached(
        [sys.executable, "-m", "belief_tasks.commands.belief_eval", *args], lambda: db, 20, seconds=600, poll=0.1
    )
    done = cache_rows(db)
    assert 20 <= done < BEAR_REQUESTS, f"kill came too late to test anything ({done} rows)"
    assert not list((tmp_path / "killed").rglob("results_*.json")), "a killed run left a results file"

    resumed = cli(args)
    cached, remaining = cached_line(resumed.stdout + resumed.stderr)
    assert cached == done and remaining == BEAR_REQUESTS - done  # finished requests: none recomputed
    assert cache_rows(db) == BEAR_REQUESTS
    results, records = load_run(tmp_path / "killed")
    ref_results, ref_records = load_run(reference)
    assert records == ref_records
    assert_same_metrics(results, ref_results)


@pytest.mark.parametrize(
    "limit_args, world, fails",
    [
        (["--limit", "1"], "2", True),
        (["--limit=3"], "4", True),
        (["-L", "2"], "2", False),
        (["--limit", "0.5"], "2", False),
        (["--limit", "1"], "1", False),
        ([], "8", False),
    ],
)
def test_limit_below_the_process_count_stops_before_model_time(monkeypatch, capsys, limit_args, world, fails):
    from belief_tasks.commands.belief_eval import check_limit

    monkeypatch.setenv("WORLD_SIZE", world)
    args = ["--model", "hf", "--tasks", "belief_bear", *limit_args]
    if fails:
        with pytest.raises(SystemExit) as stop:
            check_limit(args)
        assert stop.value.code == 2
        assert f"below the {world} processes" in capsys.readouterr().err
    else:
        check_limit(args)


def test_hf_mlm_two_processes_give_the_numbers_of_one(tmp_path):
    """hf-mlm shards documents and gathers records under accelerate launch, like lm-eval's hf."""
    from test_mlm_tiny import build_tiny_mlm

    model = build_tiny_mlm(tmp_path / "tiny", favour="paris")

    def args(out: Path) -> list[str]:
        meta = {
            "source": "sample",
            "pretrained": str(model),
            "relations": "P36,P37",
            "max_facts_per_relation": 3,
            "templates": "0",
            "accuracy_draws": 200,
        }
        return [
            "--model",
            "hf-mlm",
            "--model_args",
            f"pretrained={model},dtype=float32",
            "--device",
            "cpu",
            "--tasks",
            "belief_mlm_myriadlama,belief_bear",
            "--limit",
            "4",
            "--metadata",
            json.dumps(meta),
            "--batch_size",
            "1",
            "--output_path",
            str(out),
            "--log_samples",
        ]  # 1: bit-identical forwards

    cli(args(tmp_path / "one"))
    proc = cli(args(tmp_path / "two"), launcher=accelerate_cpu(2), ACCELERATE_USE_CPU="1")
    assert "on rank 1" in proc.stdout + proc.stderr
    ref_results, ref_records = load_run(tmp_path / "one")
    results, records = load_run(tmp_path / "two")
    assert records.keys() == ref_records.keys() and len(records) == 8  # 4 docs per task, gathered once
    assert records == ref_records
    assert_same_metrics(results, ref_results)
