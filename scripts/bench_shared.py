"""Stock ``hf`` against ``hf-shared`` on three prefix-heavy workloads, side by side in one run.

For each workload it prints the time ratio stock/shared (wall clock and process CPU
time: on a shared machine CPU time is the steadier of the two), the tokens each
backend forwarded over the distinct tokens the workload needs (the trie of all
sequences: the floor of the work), and model FLOP utilisation,
2 x parameters x forwarded tokens per CPU-second over a float32 matmul peak
measured in the same run (also per CPU-second).

    python scripts/bench_shared.py            # IC-LKE 20x100, BELIEF 20x(1+100), BEAR 200
    python scripts/bench_shared.py --quick    # minutes: 1 fact, 2 prompts, 20 instances

Workloads are built from the bundled sample (belief_tasks/sample_data).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from belief_tasks.backends.prefix_tree import distinct_tokens  # noqa: E402
from belief_tasks.data import load_facts  # noqa: E402
from belief_tasks.facts import seeding  # noqa: E402
from belief_tasks.requests import encode_requests  # noqa: E402

# ------------------------------------------------------------------ workloads


def _by_relation(factset):
    rels: dict[str, list] = {}
    for f in factset.facts:
        rels.setdefault(f.relation, []).append(f)
    return rels


def iclke_requests(factset, n_facts: int, n_choices: int = 100, n_examples: int = 50, seed: int = 0):
    """Per fact: 50 "subject object" lines of its relation, then the subject; 100 object choices
    (a list of requests per fact: its prediction is the likeliest)."""
    rels = _by_relation(factset)
    everyone = sorted({e.label for r in factset.relations.values() for e in r.answer_space})
    out = []
    facts = [f for fs in rels.values() for f in fs[:3]][:n_facts]
    for fact in facts:
        others = [f for f in rels[fact.relation] if f.id != fact.id]
        demos = [others[i % len(others)] for i in range(n_examples)]
        demos = seeding.sample(demos, len(demos), seed, "iclke", fact.id)
        context = "\n".join(f"{d.subject.label} {d.object.label}" for d in demos) + f"\n{fact.subject.label}"
        space = [e.label for e in factset.relations[fact.relation].answer_space if e.label != fact.object.label]
        pad = [x for x in everyone if x not in space and x != fact.object.label]
        choices = [fact.object.label] + (space + seeding.sample(pad, n_choices, seed, "pad", fact.id))[: n_choices - 1]
        out.append([(context, f" {c}") for c in choices])
    return out


def belief_prompts(factset, n_prompts: int, seed: int = 0):
    """BELIEF-ICL style: four demonstrations (one per statement template), then the query's template cut before [Y]."""
    rels = _by_relation(factset)
    prompts = []
    facts = [f for fs in rels.values() for f in fs[:2]][:n_prompts]
    for fact in facts:
        rel = factset.relations[fact.relation]
        templates = (rel.templates_of("statement", False) * 4)[:4]
        others = seeding.sample([f for f in rels[fact.relation] if f.id != fact.id], 4, seed, "belief", fact.id)
        demos = [t.fill(o.subject.label, o.object.label) for t, o in zip(templates, others)]
        query = templates[0].text.replace("[X]", fact.subject.label).split("[Y]")[0].rstrip()
        prompts.append("\n".join(demos + [query]))
    return prompts


def bear_requests(factset, n_instances: int):
    """BEAR: every answer-space entity in the fact's first statement template, after an empty context
    (a list of requests per instance: its prediction is the likeliest)."""
    out = []
    rels = _by_relation(factset)
    facts = [f for fs in zip(*rels.values()) for f in fs][:n_instances]  # round-robin over relations
    for fact in facts:
        rel = factset.relations[fact.relation]
        template = rel.templates_of("statement", False)[0]
        out.append([("", template.fill(fact.subject.label, e.label)) for e in rel.answer_space])
    return out


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
    wall, cpu = time.perf_counter(), time.process_time()
    out = getattr(lm, kind)(instances, disable_tqdm=True)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    counter.handle.remove()
    return {"wall": wall, "cpu": cpu, "tokens": counter.tokens, "out": out}


def median_run(runs: list[dict]) -> dict:
    """Median wall and CPU time over repeated runs (each taken separately); the last run's outputs and tokens."""
    return dict(
        runs[-1], wall=statistics.median(r["wall"] for r in runs), cpu=statistics.median(r["cpu"] for r in runs)
    )


def predictions(results, sizes: list[int]) -> list[int]:
    """Per group of consecutive requests (an instance's options): the index of the likeliest."""
    out, at = [], 0
    for n in sizes:
        lls = [ll for ll, _ in results[at : at + n]]
        out.append(lls.index(max(lls)))
        at += n
    return out


#: the task the benchmarks' requests belong to. They are our tasks' requests, built here without the task objects,
#: so they are tagged as a task of ours: our hooks serve them as in a run (the seeded samples on stock ``hf`` go
#: only to our sampler, ``harness.OUR_TASKS``; stock ``generate`` refuses their ``seed``)
BENCH_TASK = "belief_bench"


def bench_instance(kind: str, args, index: int, repeats: int = 1):
    """One request of a workload, as a task of ours would send it."""
    from lm_eval.api.instance import Instance

    from belief_tasks.hooks import harness

    harness.OUR_TASKS.add(BENCH_TASK)  # as BeliefTask adds its name when it is built
    return Instance(kind, {}, args, index, metadata=(BENCH_TASK, index, repeats))


def make_instances(kind: str, args_list, repeats: int = 1):
    return [bench_instance(kind, a, i, repeats) for i, a in enumerate(args_list)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 fact, 2 prompts, 20 BEAR instances")
    ap.add_argument("--facts", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--instances", type=int, default=200)
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
    args = ap.parse_args()
    if args.quick:
        args.facts, args.prompts, args.instances = 1, 2, 20
    torch.set_num_threads(args.threads)
    bs, shared_bs = (x if x == "auto" else int(x) for x in (args.batch_size, args.shared_batch_size))

    from lm_eval.models.huggingface import HFLM

    from belief_tasks.backends.shared import HFSharedPrefixLM
    from belief_tasks.commands.default_model import default_model_path
    from belief_tasks.tasks.belief_icl import sampling_kwargs

    path = str(default_model_path())
    common = dict(pretrained=path, device="cpu", dtype="float32", max_batch_size=64)
    stock, shared = HFLM(batch_size=bs, **common), HFSharedPrefixLM(batch_size=shared_bs, **common)
    params = sum(p.numel() for p in stock.model.parameters())
    factset = load_facts("bear", {"source": "sample"})

    gen = {"until": ["\n", "."], "max_gen_toks": 16, "do_sample": False}
    prompts = belief_prompts(factset, args.prompts)
    gen_reqs = make_instances("generate_until", [(p, gen) for p in prompts])
    # as the BELIEF task sends them: K distinct requests per prompt (sample i carries a tagged stop string)
    # (and its own seed, so stock hf generates each sample alone: docs/backends_support.md)
    sample_reqs = make_instances(
        "generate_until",
        [(p, sampling_kwargs(gen, i, seeding.derive_seed(1234, p, i))) for p in prompts for i in range(args.samples)],
    )
    iclke, bear = iclke_requests(factset, args.facts), bear_requests(factset, args.instances)
    groups = {"iclke": [len(g) for g in iclke], "bear": [len(g) for g in bear]}
    workloads = {
        "iclke": (
            "loglikelihood",
            make_instances("loglikelihood", [r for g in iclke for r in g]),
            f"IC-LKE: {args.facts} facts x 100 choices after 50 examples",
        ),
        "belief": (
            "generate_until",
            gen_reqs + sample_reqs,
            f"BELIEF: greedy + {args.samples} samples for {args.prompts} prompts",
        ),
        "bear": (
            "loglikelihood",
            make_instances("loglikelihood", [r for g in bear for r in g]),
            f"BEAR: {args.instances} instances x full answer space, empty context",
        ),
    }

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
            gaps = [abs(a[0] - b[0]) for a, b in zip(s["out"], h["out"])]
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

    print(f"\nbatch size: stock {bs}, shared {shared_bs}; medians of {args.repeats} alternating run(s)")
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads {args.threads}, "
        f"load average {os.getloadavg()[0]:.1f}; matmul peak {max(peaks) / 1e9:.1f} GFLOP per CPU-second; "
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


if __name__ == "__main__":
    main()
