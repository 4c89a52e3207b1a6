"""What keeping every answer costs: the same run with and without lm-eval's request cache, side by side.

``belief-eval`` keeps every answer in ``<output_path>/cache`` by default (docs/scale.md, "Interruptions"): lm-eval's
``CachingLM`` looks every request up before the model runs, the backend writes each answer as it is computed
(one SQLite transaction per answer) and ``CachingLM`` writes it again at the end of each request type. This script
loads the model once and runs the same tasks in rounds, A B A B: without a cache ("off"), with a fresh cache
("cold": what a first run pays) and, once per round, again on the cache just filled ("warm": what a resumed or
repeated run pays, every answer read back). It prints each arm's median wall time, the ratios, and how many
answers the cache holds.

    python -m benchmarks answer_cache                                  # the main job's tasks on hf-shared
    python -m benchmarks answer_cache --tasks belief_demo_bear --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from benchmarks import measure, workloads


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="belief_demo")
    ap.add_argument("--metadata", default='{"source": "sample"}')
    ap.add_argument("--model", default="hf-shared")
    ap.add_argument("--batch_size", default="8")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None, help="write the timings here")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse(argv)
    import belief_tasks

    belief_tasks.install()
    import lm_eval
    from lm_eval.api.model import CacheHook
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    from belief_tasks.hooks.answer_cache import answers_held
    from belief_tasks.paths import task_yamls_dir

    model_args = {"pretrained": workloads.model_path(), "dtype": "float32"}
    meta = json.loads(args.metadata)
    lm = get_model(args.model).create_from_arg_obj(model_args, {"batch_size": args.batch_size, "device": "cpu"})

    def run(cache: str | None) -> float:
        lm.set_cache_hook(CacheHook(None))  # CachingLM leaves its hook on the model: the next arm starts bare
        tm = TaskManager(include_path=str(task_yamls_dir()), metadata={**model_args, **meta})
        _, wall, _ = measure.clocked(
            lm_eval.simple_evaluate,
            model=lm,
            tasks=args.tasks.split(","),
            task_manager=tm,
            use_cache=cache,
            log_samples=True,
            metadata=meta,
            bootstrap_iters=0,
        )
        return wall

    times: dict[str, list[float]] = {"off": [], "cold": [], "warm": []}
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            times["off"].append(run(None))
            prefix = str(Path(tmp) / f"round{r}")
            times["cold"].append(run(prefix))
            times["warm"].append(run(prefix))
            rows = answers_held(Path(f"{prefix}_rank0.db"))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.tasks} on {args.model}: {rows} answers kept; medians of {args.rounds} rounds: off {med['off']:.1f} s, "
        f"cold cache {med['cold']:.1f} s ({med['cold'] / med['off']:.3f}x), warm cache {med['warm']:.1f} s "
        f"({med['warm'] / med['off']:.3f}x); cold - off = {1000 * (med['cold'] - med['off']) / max(rows, 1):.2f} ms "
        "per answer kept"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"tasks": args.tasks, "model": args.model, "answers": rows, "times_s": times}, indent=1)
        )
