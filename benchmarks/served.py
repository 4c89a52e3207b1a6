"""What a served IC-LKE run costs on ``vllm serve``, by route, in one sitting against one server.

Routes (each the IC-LKE workload of ``engines``, from ``workloads.py``: per fact, 100 options after 50 demonstrations):

* ``local-completions``: lm-eval's, ``echo: true, logprobs: 1`` on ``/v1/completions`` (vLLM then reads no
  prefix cache: every option is a full prefill), batches of ``--batch_size`` prompts per HTTP call;
* ``local-completions-concurrent``: the same with ``--concurrency`` calls in flight;
* ``vllm-serve-shared``: ours, the token endpoint in two passes per context with the cache read
  (``belief_tasks/backends/vllm_served.py``), ``--concurrency`` calls in flight.

One server (the CPU settings of docs/backends_support.md, plus ``--enable-scale-out
--enable-prompt-tokens-details``, ``--block-size 32``, and the development endpoints for
``/reset_prefix_cache``, called before every arm so that no arm finds another's blocks). The arms run in
rotating order for ``--rounds`` rounds; the table gives medians and each route's throughput over
``local-completions``', and compares every log-likelihood with ``local-completions``'.

    .venv-vllm/bin/python -m benchmarks served --facts 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks import measure, workloads

CPU_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
ROUTES = ("local-completions", "local-completions-concurrent", "vllm-serve-shared")


def start_server(model: str, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        "smol",
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--gpu-memory-utilization",
        "0.3",
        "--enforce-eager",
        "--no-enable-chunked-prefill",
        "--enable-scale-out",
        "--enable-prompt-tokens-details",
        "--block-size",
        "32",
    ]
    env = {**os.environ, **{k: v for k, v in CPU_ENV.items() if k not in os.environ}, "VLLM_SERVER_DEV_MODE": "1"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(2)
    raise SystemExit("vllm serve did not start in 15 minutes")


def make(route: str, origin: str, model: str, args):
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from belief_tasks.backends.vllm_served import VLLMServedSharedLM

    common = {
        "model": "smol",
        "base_url": f"{origin}/v1/completions",
        "tokenizer": model,
        "tokenizer_backend": "huggingface",
        "max_retries": 1,
        "batch_size": args.batch_size,
    }
    if route == "local-completions":
        return LocalCompletionsAPI(**common, num_concurrent=1)
    if route == "local-completions-concurrent":
        return LocalCompletionsAPI(**common, num_concurrent=args.concurrency)
    return VLLMServedSharedLM(**common, num_concurrent=args.concurrency)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--batch_size", type=int, default=16, help="prompts per HTTP call of local-completions")
    ap.add_argument("--concurrency", type=int, default=4, help="HTTP calls in flight (the concurrent routes)")
    ap.add_argument("--routes", default=",".join(ROUTES))
    ap.add_argument("--requests", help="an `engines --save_requests` file (its iclke workload)")
    ap.add_argument("--model", help="model folder (default: the bundled model)")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)
    import belief_tasks

    belief_tasks.install()
    model = args.model or workloads.model_path()
    if args.requests:
        saved = json.loads(Path(args.requests).read_text())["iclke"]
        pairs, groups = [tuple(a) for kind, a in saved["requests"]], saved["groups"]
    else:
        options = workloads.iclke_requests(workloads.sample_facts(), args.facts)
        pairs, groups = [r for g in options for r in g], [len(g) for g in options]
    from lm_eval.api.instance import Instance

    instances = [Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)]
    routes = args.routes.split(",")
    walls, outputs, counts = sitting(routes, instances, model, args)
    print_table(routes, walls, outputs, counts, groups, args.rounds)
    if args.json:
        Path(args.json).write_text(json.dumps({"walls": walls, "counts": counts, "args": vars(args)}, indent=1))


def sitting(routes: list[str], instances: list, model: str, args) -> tuple[dict, dict, dict]:
    """Every route on one server for ``args.rounds`` rounds in rotating order, the prefix cache reset before each:
    per route its walls, its outputs and the server's counts (the last round)."""
    log = Path(tempfile.mkdtemp()) / "server.log"
    t0 = time.perf_counter()
    proc, origin = start_server(model, log)
    print(f"server up in {time.perf_counter() - t0:.1f} s; {len(instances)} IC-LKE requests", file=sys.stderr)
    walls: dict[str, list[float]] = {r: [] for r in routes}
    outputs, counts = {}, {}
    try:
        for k, route in measure.rotations(routes, args.rounds):
            urllib.request.urlopen(urllib.request.Request(f"{origin}/reset_prefix_cache", method="POST"))
            lm = make(route, origin, model, args)
            outputs[route], wall, _ = measure.clocked(lm.loglikelihood, instances, disable_tqdm=True)
            walls[route].append(wall)
            counts[route] = vars(lm.cache_counts) if hasattr(lm, "cache_counts") else None
            print(f"round {k + 1} {route}: {walls[route][-1]:.1f} s", file=sys.stderr, flush=True)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
    return walls, outputs, counts


def print_table(routes: list[str], walls: dict, outputs: dict, counts: dict, groups: list[int], rounds: int) -> None:
    base = statistics.median(walls[routes[0]])
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {measure.load():.1f}; "
        f"medians of {rounds} round(s), routes in rotating order\n"
    )
    print(
        f"| route | requests | wall s (rounds) | requests/s | throughput / {routes[0]} | max dLL vs {routes[0]} | "
        "argmax equal | server tokens computed (of prompt tokens) | recomputed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ref = outputs[routes[0]]
    for route in routes:
        med = statistics.median(walls[route])
        gap = max(measure.gaps(outputs[route], ref))
        argmax = measure.predictions(outputs[route], groups) == measure.predictions(ref, groups)
        c = counts[route]
        work = f"{c['computed_tokens']} ({c['prompt_tokens']})" if c else "all (no cache read)"
        print(
            f"| {route} | {len(ref)} | {med:.2f} ({', '.join(f'{w:.1f}' for w in walls[route])}) | "
            f"{len(ref) / med:.2f} | {base / med:.2f}x | {gap:.1e} | {argmax} | {work} | "
            f"{c['recomputed'] if c else ''} |"
        )
