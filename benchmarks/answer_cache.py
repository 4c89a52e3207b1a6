"""What keeping every answer costs: the same run with and without lm-eval's request cache, side by side.

``belief-eval`` keeps every answer in ``<output_path>/cache`` by default (docs/scale.md, "Interruptions"): lm-eval's
``CachingLM`` looks every request up before the model runs, the backend hands each answer to the cache as it is
computed and ``CachingLM`` writes it again at the end of each request type; our ``AnswerStore`` writes them to the
file a second at a time (``hooks/answer_store.py``). This script loads the model once and runs the same tasks in
rounds, A B A B: without a cache ("off"), with a fresh cache ("cold": what a first run pays), once per round again
on the cache just filled ("warm": what a resumed or repeated run pays, every answer read back) and, with
``--unbatched``, with a fresh cache written as lm-eval writes it (one transaction per answer: the cost before the
store). It prints each arm's median wall time, answers per second, the ratios, and how many answers the cache holds.

    python -m benchmarks answer_cache                                  # the main job's tasks on hf-shared
    python -m benchmarks answer_cache --tasks belief_demo_bear --rounds 3
    python -m benchmarks answer_cache --tasks belief_bear --unbatched \
        --metadata '{"bear_path": "/work/shared/data/bear/BEAR", "max_facts_per_relation": 2, "templates": "0"}'
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
    ap.add_argument("--unbatched", action="store_true", help="also a fresh cache written as lm-eval writes it")
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

    from belief_tasks.hooks import harness

    batched = harness.batch_cache_writes

    def run(cache: str | None, batch: bool = True) -> float:
        lm.set_cache_hook(CacheHook(None))  # CachingLM leaves its hook on the model: the next arm starts bare
        harness.batch_cache_writes = batched if batch else (lambda caching: None)  # the evaluate hook's call
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

    times: dict[str, list[float]] = {"off": [], "cold": [], "warm": [], **({"unbatched": []} if args.unbatched else {})}
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            times["off"].append(run(None))
            prefix = str(Path(tmp) / f"round{r}")
            times["cold"].append(run(prefix))
            times["warm"].append(run(prefix))
            if args.unbatched:
                times["unbatched"].append(run(str(Path(tmp) / f"unbatched{r}"), batch=False))
            rows = answers_held(Path(f"{prefix}_rank0.db"))
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    report(args, times, rows)


def report(args, times: dict[str, list[float]], rows: int) -> None:
    """Prints each arm's median wall time, answers per second and ratio to "off"; writes the timings to ``--json``."""
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{args.tasks} on {args.model}: {rows} answers kept; medians of {args.rounds} rounds: "
        + "; ".join(
            f"{k} {t:.1f} s, {rows / t:.0f} answers/s ({t / med['off']:.3f}x off)" for k, t in med.items() if t > 0
        )
        + f"; cold - off = {1000 * (med['cold'] - med['off']) / max(rows, 1):.3f} ms per answer kept"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"tasks": args.tasks, "model": args.model, "answers": rows, "times_s": times}, indent=1)
        )
