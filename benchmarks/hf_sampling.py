"""BELIEF's seeded samples on stock ``hf``: one ``generate`` per sample (old) against batched (new).

The workload is what ``belief_{mp,qa}_*`` sends for its sampled prompts: for each of N prompts
of the bundled sample, the greedy request and K seeded temperature-1 samples (the task's own
``Instance``s). Both paths run on the same ``HFLM`` in this process, one after the other:

* old: ``BELIEF_HF_SEEDED_SAMPLING=one-by-one``, each sample alone under ``torch.manual_seed``;
* new: seeded samples grouped without their seed, decoded in shared ``generate`` calls.

It prints wall and process CPU time of each, the ratio old / new, and whether every text is
equal (and which differ).

    python scripts/bench_hf_sampling.py                       # 4 prompts x (1 + 100), batch 32
    python scripts/bench_hf_sampling.py --prompts 8 --batch_size 64 --json bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402  (the installed belief_tasks: its metrics package is installed, not in the checkout)

MODEL = Path.home() / ".cache/belief_tasks/models/SmolLM2-135M-Instruct"


def belief_instances(task_name: str, n_prompts: int, k: int) -> list:
    """The task's own requests for its sampled prompts: greedy + K seeded samples each."""
    from lm_eval.tasks import TaskManager

    import belief_tasks
    from belief_tasks.paths import task_yamls_dir

    belief_tasks.install()
    meta = {"source": "sample", "max_facts_per_relation": 2, "confidence_samples": k, "confidence_prompts": n_prompts}
    tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=meta)
    task = next(iter(tm.load([task_name])["tasks"].values()))
    task.build_all_requests(rank=0, world_size=1)
    sampled = {d for d in {i.doc_id for i in task.instances} if sum(1 for i in task.instances if i.doc_id == d) > 1}
    return [i for i in task.instances if i.doc_id in sampled]


def run(lm, instances, mode: str) -> dict:
    if mode == "old":
        os.environ["BELIEF_HF_SEEDED_SAMPLING"] = "one-by-one"
    else:
        os.environ.pop("BELIEF_HF_SEEDED_SAMPLING", None)
    wall, cpu = time.perf_counter(), time.process_time()
    out = lm.generate_until(instances, disable_tqdm=True)
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "out": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="belief_mp_4random")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--batch_size", default="32", help="both paths (old: greedy requests only share batches)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--model", default=str(MODEL))
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from lm_eval.models.huggingface import HFLM

    instances = belief_instances(args.task, args.prompts, args.samples)
    n_prompts = len({i.doc_id for i in instances})
    lm = HFLM(pretrained=args.model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
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
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    print(json.dumps(result, indent=1))
    for k in differ[:10]:
        print(f"request {k}: old {old['out'][k]!r} new {new['out'][k]!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
