"""Stock ``hf`` against ``hf-shared`` on three prefix-heavy workloads, side by side in one run.

For each workload it prints the time ratio stock/shared (wall clock and process CPU
time: on a shared machine CPU time is the steadier of the two), the tokens each
backend forwarded over the distinct tokens the workload needs (the trie of all
sequences: the floor of the work), and model FLOP utilisation,
2 x parameters x forwarded tokens per CPU-second over a float32 matmul peak
measured in the same run (also per CPU-second).

    python -m benchmarks shared            # IC-LKE 20x100, BELIEF 20x(1+100), BEAR 200
    python -m benchmarks shared --quick    # minutes: 1 fact, 2 prompts, 20 instances

Workloads are built from the bundled sample (belief_tasks/sample_data) by ``workloads.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from belief_tasks.backends.prefix_tree import distinct_tokens
from belief_tasks.requests import encode_requests
from benchmarks import measure
from benchmarks.measure import clocked, machine, predictions
from benchmarks.workloads import (
    Sizes,
    add_size_arguments,
    bear_requests,
    belief_prompts,
    belief_requests,
    iclke_requests,
    make_instances,
    model_path,
    sample_facts,
    sizes_of,
)

#: the sizes of the three workloads (docs/benchmarks.md's table), and of --quick
SIZES = Sizes(facts=20, instances=200, prompts=20, samples=100)
QUICK = Sizes(facts=1, instances=20, prompts=2, samples=100)

# ------------------------------------------------------------------ measuring


def matmul_peak(n: int = 1024, reps: int = 8) -> float:
    """float32 FLOP per CPU-second of a square matmul (the ceiling a dense model can reach)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = 0.0
    for _ in range(reps):
        t = time.process_time()
        a @ b
        best = max(best, 2 * n**3 / max(time.process_time() - t, 1e-9))
    return best


class TokenCounter:
    """Counts input_ids entries of every top-level forward (prefill, decode steps, scoring)."""

    def __init__(self, model):
        self.tokens = 0
        self.handle = model.register_forward_pre_hook(self.hook, with_kwargs=True)

    def hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            self.tokens += ids.numel()


def timed(lm, kind: str, instances) -> dict:
    counter = TokenCounter(lm.model)
    out, wall, cpu = clocked(getattr(lm, kind), instances, disable_tqdm=True)
    counter.handle.remove()
    return {"wall": wall, "cpu": cpu, "tokens": counter.tokens, "out": out}


def median_run(runs: list[dict]) -> dict:
    """Median wall and CPU time over repeated runs (each taken separately); the last run's outputs and tokens."""
    return dict(
        runs[-1], wall=statistics.median(r["wall"] for r in runs), cpu=statistics.median(r["cpu"] for r in runs)
    )


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_size_arguments(ap, SIZES, QUICK)
    ap.add_argument("--batch_size", default="16", help="stock hf (its rows carry the whole shared prefix)")
    ap.add_argument(
        "--shared_batch_size",
        default="auto",
        help="hf-shared (its rows are short suffixes; auto packs max_batch_tokens per forward)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="iclke,belief,bear", help="workloads to run, e.g. --only bear")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run both arms this many times, alternating, and report the medians (a busy machine)",
    )
    ap.add_argument("--json", help="also write the numbers here")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    sizes_of(args)
    torch.set_num_threads(args.threads)
    bs, shared_bs = (x if x == "auto" else int(x) for x in (args.batch_size, args.shared_batch_size))

    stock, shared, params = load(bs, shared_bs)
    workloads, groups, prompts, gen_reqs = build(args)

    peaks = [matmul_peak()]
    rows = []
    for name in args.only.split(","):
        kind, instances, title = workloads[name]
        print(f"\n== {title}: {len(instances)} requests", flush=True)
        stock_runs, shared_runs = [], []
        for _ in range(args.repeats):  # alternating, so a load change hits both arms alike
            stock_runs.append(timed(stock, kind, instances))
            peaks.append(matmul_peak())
            shared.stats.update(tokens_forwarded=0, forward_calls=0, generated_tokens=0)
            shared_runs.append(timed(shared, kind, instances))
            peaks.append(matmul_peak())
        s, h = median_run(stock_runs), median_run(shared_runs)
        if kind == "loglikelihood":
            encoded = list(encode_requests(shared, [r.args for r in instances]))
            needed = distinct_tokens([(c + x)[-(shared.max_length + 1) :][:-1] for c, x in encoded])
            gaps = measure.gaps(s["out"], h["out"])
            same_greedy = all(a[1] == b[1] for a, b in zip(s["out"], h["out"]))
            check = (
                f"|stock - shared| max {max(gaps):.2e} mean {statistics.mean(gaps):.1e} nats, "
                f"{sum(g > 1e-4 for g in gaps)} of {len(gaps)} above 1e-4; is_greedy equal: {same_greedy}; "
                f"predictions equal: {predictions(s['out'], groups[name]) == predictions(h['out'], groups[name])}"
            )
        else:
            # prompts once + every generated token but each row's last (it is never fed back)
            prompt_ids = [shared.tok_batch_encode([p])[0][0].tolist() for p in prompts]
            needed = distinct_tokens(prompt_ids) + shared.stats["generated_tokens"]
            greedy_equal = s["out"][: len(gen_reqs)] == h["out"][: len(gen_reqs)]
            check = f"greedy outputs equal: {greedy_equal}"
        peak = max(peaks)
        row = {
            "workload": title,
            "requests": len(instances),
            "stock_wall_s": round(s["wall"], 1),
            "shared_wall_s": round(h["wall"], 1),
            "speedup_wall": round(s["wall"] / h["wall"], 2),
            "speedup_cpu": round(s["cpu"] / h["cpu"], 2),
            "runs_wall_s": [[round(a["wall"], 1), round(b["wall"], 1)] for a, b in zip(stock_runs, shared_runs)],
            "runs_cpu_s": [[round(a["cpu"], 1), round(b["cpu"], 1)] for a, b in zip(stock_runs, shared_runs)],
            "shared_forward_calls": shared.stats["forward_calls"],
            "stock_tokens_over_needed": round(s["tokens"] / needed, 2),
            "shared_tokens_over_needed": round(h["tokens"] / needed, 2),
            "stock_mfu": round(2 * params * s["tokens"] / s["cpu"] / peak, 3),
            "shared_mfu": round(2 * params * h["tokens"] / h["cpu"] / peak, 3),
            "check": check,
        }
        rows.append(row)
        print(json.dumps(row, indent=1), flush=True)

    report(rows, args, bs, shared_bs, peaks, params)


def load(bs, shared_bs):
    """Both arms on the bundled model (float32, CPU), and its parameter count."""
    from lm_eval.models.huggingface import HFLM

    from belief_tasks.backends.shared import HFSharedPrefixLM

    path = model_path()
    common = dict(pretrained=path, device="cpu", dtype="float32", max_batch_size=64)
    stock, shared = HFLM(batch_size=bs, **common), HFSharedPrefixLM(batch_size=shared_bs, **common)
    params = sum(p.numel() for p in stock.model.parameters())
    return stock, shared, params


def build(args):
    """The three workloads (request type, instances, title), the option groups of the scored ones, the BELIEF
    prompts and their greedy requests."""
    factset = sample_facts()

    prompts = belief_prompts(factset, args.prompts)
    # as the BELIEF task sends them: the greedy request, then K distinct requests per prompt (sample i carries a
    # tagged stop string and its own seed: docs/backends_support.md)
    belief = make_instances("generate_until", [a for _, a in belief_requests(prompts, args.samples)])
    gen_reqs = belief[: len(prompts)]
    iclke, bear = iclke_requests(factset, args.facts, args.options), bear_requests(factset, args.instances)
    groups = {"iclke": [len(g) for g in iclke], "bear": [len(g) for g in bear]}
    workloads = {
        "iclke": (
            "loglikelihood",
            make_instances("loglikelihood", [r for g in iclke for r in g]),
            f"IC-LKE: {args.facts} facts x {args.options} choices after 50 examples",
        ),
        "belief": ("generate_until", belief, f"BELIEF: greedy + {args.samples} samples for {args.prompts} prompts"),
        "bear": (
            "loglikelihood",
            make_instances("loglikelihood", [r for g in bear for r in g]),
            f"BEAR: {args.instances} instances x full answer space, empty context",
        ),
    }

    return workloads, groups, prompts, gen_reqs


def report(rows: list[dict], args, bs, shared_bs, peaks: list[float], params: int) -> None:
    print(f"\nbatch size: stock {bs}, shared {shared_bs}; medians of {args.repeats} alternating run(s)")
    print(
        f"machine: {machine()}, torch threads {args.threads}; "
        f"matmul peak {max(peaks) / 1e9:.1f} GFLOP per CPU-second; "
        f"params {params / 1e6:.1f}M"
    )
    print(
        "| workload | requests | stock s | shared s | speed-up wall | speed-up CPU | tokens/needed stock "
        "| tokens/needed shared | MFU stock | MFU shared |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['workload']} | {r['requests']} | {r['stock_wall_s']} | {r['shared_wall_s']} "
            f"| {r['speedup_wall']}x | "
            f"{r['speedup_cpu']}x | {r['stock_tokens_over_needed']} | {r['shared_tokens_over_needed']} | "
            f"{r['stock_mfu']:.0%} | {r['shared_mfu']:.0%} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rows": rows, "peak_flop_per_cpu_s": max(peaks), "params": params}, indent=1)
        )
