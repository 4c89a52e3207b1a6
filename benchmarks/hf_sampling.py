"""BELIEF's seeded samples on stock ``hf``: one ``generate`` per sample (old) against batched (new).

The workload is what ``belief_{mp,qa}_*`` sends for its sampled prompts: for each of N prompts
of the bundled sample, the greedy request and K seeded temperature-1 samples (the task's own
``Instance``s). Both paths run on the same ``HFLM`` in this process, one after the other:

* old: ``BELIEF_HF_SEEDED_SAMPLING=one-by-one``, each sample alone under ``torch.manual_seed``;
* new: seeded samples grouped without their seed, decoded in shared ``generate`` calls.

It prints wall and process CPU time of each, the ratio old / new, and whether every text is
equal (and which differ).

    python -m benchmarks hf_sampling                       # 4 prompts x (1 + 100), batch 32
    python -m benchmarks hf_sampling --prompts 8 --batch_size 64 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from benchmarks import measure, workloads


def belief_instances(task_name: str, n_prompts: int, k: int) -> list:
    """The task's own requests for its sampled prompts: greedy + K seeded samples each."""
    import belief_tasks

    belief_tasks.install()
    meta = {"source": "sample", "max_facts_per_relation": 2, "confidence_samples": k, "confidence_prompts": n_prompts}
    task = workloads.build_task(task_name, meta)
    sampled = {d for d in {i.doc_id for i in task.instances} if sum(1 for i in task.instances if i.doc_id == d) > 1}
    return [i for i in task.instances if i.doc_id in sampled]


def run(lm, instances, mode: str) -> dict:
    if mode == "old":
        os.environ["BELIEF_HF_SEEDED_SAMPLING"] = "one-by-one"
    else:
        os.environ.pop("BELIEF_HF_SEEDED_SAMPLING", None)
    out, wall, cpu = measure.clocked(lm.generate_until, instances, disable_tqdm=True)
    return {"wall": wall, "cpu": cpu, "out": out}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="belief_mp_4random")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--batch_size", default="32", help="both paths (old: greedy requests only share batches)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--model", help="model folder (default: the bundled model)")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from lm_eval.models.huggingface import HFLM

    instances = belief_instances(args.task, args.prompts, args.samples)
    n_prompts = len({i.doc_id for i in instances})
    lm = HFLM(
        pretrained=args.model or workloads.model_path(),
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
    )
    run(lm, instances[:2], "new")  # warm-up (allocator, kernels), not timed
    old = run(lm, instances, "old")
    new = run(lm, instances, "new")
    differ = [k for k, (a, b) in enumerate(zip(old["out"], new["out"], strict=True)) if a != b]
    result = {
        "task": args.task,
        "prompts": n_prompts,
        "samples": args.samples,
        "requests": len(instances),
        "batch_size": args.batch_size,
        "threads": args.threads,
        "device": args.device,
        "dtype": args.dtype,
        "old_wall_s": round(old["wall"], 1),
        "new_wall_s": round(new["wall"], 1),
        "old_cpu_s": round(old["cpu"], 1),
        "new_cpu_s": round(new["cpu"], 1),
        "speedup_wall": round(old["wall"] / new["wall"], 2),
        "speedup_cpu": round(old["cpu"] / max(new["cpu"], 1e-9), 2),
        "texts_equal": not differ,
        "texts_differing": len(differ),
        "torch": torch.__version__,
        "machine": measure.machine(),
    }
    print(json.dumps(result, indent=1))
    for k in differ[:10]:
        print(f"request {k}: old {old['out'][k]!r} new {new['out'][k]!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
