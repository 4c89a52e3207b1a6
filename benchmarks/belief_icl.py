"""What the BELIEF-ICL tasks cost on the bundled model, extrapolated to the whole bundled sample.

For each of the eight tasks, takes ``--prompts`` real prompts of the bundled sample (spread over the
relations), runs them through the stock ``hf`` backend's ``generate_until`` exactly as the task sends
them (greedy, then one sampling request each), and prints one JSON object: seconds (wall and CPU) per
greedy and per sampled generation, and the projected time of each task on the full sample
(every prompt greedy + K = 100 samples on one prompt of each of the 671 pairs).

    python -m benchmarks belief_icl [--prompts 16] [--batch-size 16] [--threads 2]

On a shared machine wall time is noisy; CPU seconds of this process are printed too (with
``--threads 1`` they are close to what an idle core would take).
"""

from __future__ import annotations

import argparse
import json
import sys

from benchmarks import measure, workloads

TASKS = [(s, c) for s in ("mp", "qa") for c in ("zeroshot", "4random", "4relation", "4template")]
K = 100
GREEDY = {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}


def one_task(lm, style: str, context: str, n_prompts: int) -> dict:
    """Seconds per greedy and per sampled generation of ``n_prompts`` prompts spread over the task's prompts on the
    bundled sample, and the task's projected hours on the whole sample."""
    from lm_eval.api.instance import Instance

    from belief_tasks.options import parse_options
    from belief_tasks.tasks.belief_icl import OPTIONS, build_docs, prompts_of, sampling_kwargs

    meta = parse_options(OPTIONS, {"source": "sample", "confidence_samples": 0})
    docs = [p for d in build_docs(style, context, meta) for p in prompts_of(d, meta)]  # one per prompt
    pairs = len({d["fact_id"] for d in docs})
    step = max(1, len(docs) // n_prompts)
    chosen = docs[::step][:n_prompts]

    def reqs(kwargs_of):
        return [Instance("generate_until", d, (d["prompt"], kwargs_of(i)), idx=0) for i, d in enumerate(chosen)]

    _, g_wall, g_cpu = measure.clocked(lm.generate_until, reqs(lambda i: dict(GREEDY)), disable_tqdm=True)
    # one sampling request per prompt, all with the same tag: one batch group, as for sample i of each prompt
    _, s_wall, s_cpu = measure.clocked(lm.generate_until, reqs(lambda i: sampling_kwargs(GREEDY, 0)), disable_tqdm=True)
    n = len(chosen)
    entry = {
        "full_sample_prompts": len(docs),
        "pairs": pairs,
        "mean_prompt_chars": round(sum(len(d["prompt"]) for d in chosen) / n),
        "s_per_greedy": {"wall": round(g_wall / n, 3), "cpu": round(g_cpu / n, 3)},
        "s_per_sample": {"wall": round(s_wall / n, 3), "cpu": round(s_cpu / n, 3)},
    }
    entry["full_sample_hours"] = {
        clock: {
            "greedy": round(entry["s_per_greedy"][clock] * len(docs) / 3600, 2),
            "k100_samples": round(entry["s_per_sample"][clock] * K * pairs / 3600, 2),
        }
        for clock in ("wall", "cpu")
    }
    return entry


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16, help="prompts per task")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval.models.huggingface import HFLM

    model = workloads.model_path()
    lm = HFLM(pretrained=model, dtype="float32", device="cpu", batch_size=args.batch_size)
    torch.manual_seed(1234)
    report: dict = {
        "model": model.rstrip("/").split("/")[-1],
        "batch_size": args.batch_size,
        "torch_threads": torch.get_num_threads(),
        "prompts_per_task": args.prompts,
        "machine": measure.machine(),
        "tasks": {},
    }
    for style, context in TASKS:
        entry = one_task(lm, style, context, args.prompts)
        report["tasks"][f"belief_{style}_{context}"] = entry
        print(f"belief_{style}_{context}", json.dumps(entry), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1))
