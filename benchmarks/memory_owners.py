"""Where a run's memory goes, by owner: what lm-eval keeps (its ``Instance`` objects, the responses, the logged
samples, the per-metric value lists) and what is ours (documents, request arguments: the prompts, records).

Runs one ``belief-eval`` command in this process and, when lm-eval starts aggregating (every request answered,
every sample logged: the state that lasts until the command ends), measures the live objects of each task by
owner with a deep ``sys.getsizeof`` walk (each object counted once, in the first owner that reaches it, in the
order below), and the process's resident memory then and at its peak. Run it at two sizes of the same task (for
example two budgets) and the difference per fact is each owner's slope::

    python -m benchmarks memory_owners --json small.json -- --model dummy --tasks belief_bear_big \\
        --metadata '{"bear_big_path": "...", "budget": 0.05}' --output_path /tmp/o --log_samples --no_answer_cache
    python -m benchmarks memory_owners --slope small.json big.json

The walk counts Python objects, not the allocator's slack or freed memory the process keeps, so the owners add
up to less than the resident memory; the rest is printed as "not in these objects".
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import types
from pathlib import Path

#: the owners in the order objects are attributed (an object reached by two owners counts for the first)
OWNERS = (
    "ours: documents",
    "ours: request arguments (prompts)",
    "ours: records",
    "lm-eval: Instance objects",
    "lm-eval: responses",
    "lm-eval: logged samples",
    "lm-eval: metric value lists",
)
_ATOMS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def deep_size(roots, seen: set[int]) -> int:
    """Bytes of ``roots`` and everything they hold that ``seen`` does not hold yet (added to it)."""
    total, stack = 0, list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _ATOMS):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__") and not isinstance(obj, (str, bytes)):
            stack.append(vars(obj))
        for slot in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, slot):
                stack.append(getattr(obj, slot))
    return total


def shallow(obj, seen: set[int]) -> int:
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    return sys.getsizeof(obj)


def owners_of(acc: dict) -> dict:
    """Bytes per owner of one task's accumulator (``evaluator.evaluate``'s ``eval_results_acc[task]``)."""
    task, seen, out = acc["task"], set(), {}
    instances = task.instances
    out[OWNERS[0]] = deep_size([task.eval_docs], seen)
    out[OWNERS[1]] = deep_size([i.arguments for i in instances], seen)
    out[OWNERS[2]] = deep_size([v for values in acc["raw_metrics"].values() for v in values], seen)
    size = 0
    for inst in instances:
        size += shallow(inst, seen) + shallow(vars(inst), seen) + deep_size([inst.metadata], seen)
        size += shallow(inst.resps, seen) + shallow(inst.filtered_resps, seen)
    out[OWNERS[3]] = size
    out[OWNERS[4]] = deep_size([(i.resps, i.filtered_resps) for i in instances], seen)
    out[OWNERS[5]] = deep_size(acc["logged_samples"], seen)
    out[OWNERS[6]] = deep_size(list(acc["raw_metrics"].values()), seen)
    return {
        "documents": len(task.eval_docs),
        "requests": len(instances),
        "mb": {k: round(v / 2**20, 1) for k, v in out.items()},
    }


def measure(cli: list[str], out: Path) -> None:
    import lm_eval.evaluator as evaluator

    found: dict = {}
    original = evaluator._process_results

    def process_results(eval_results_acc, *a, **kw):
        t = time.perf_counter()
        found["rss_before_aggregating_mb"] = round(rss_mb())
        found["tasks"] = {name: owners_of(acc) for name, acc in eval_results_acc.items()}
        found["walk_s"] = round(time.perf_counter() - t, 1)
        return original(eval_results_acc, *a, **kw)

    evaluator._process_results = process_results
    from belief_tasks.commands.belief_eval import main

    start = time.perf_counter()
    main(cli)
    found["wall_s"] = round(time.perf_counter() - start, 1)
    found["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    found["command"] = cli
    out.write_text(json.dumps(found, indent=1))
    print(json.dumps(found, indent=1))


def slope(small: Path, big: Path) -> None:
    """Per fact (document) and per request, the growth of each owner and of the resident memory between two runs."""
    a, b = json.loads(small.read_text()), json.loads(big.read_text())

    def total(run: dict, key: str) -> float:
        return sum(t[key] for t in run["tasks"].values())

    docs, reqs = total(b, "documents") - total(a, "documents"), total(b, "requests") - total(a, "requests")
    print(f"between the runs: +{docs:,} documents, +{reqs:,} requests")

    def owned(run: dict, owner: str) -> float:
        return sum(t["mb"][owner] for t in run["tasks"].values())

    rows = [(k, owned(b, k) - owned(a, k)) for k in OWNERS]
    rows.append(("resident memory before aggregating", b["rss_before_aggregating_mb"] - a["rss_before_aggregating_mb"]))
    rows.append(("peak resident memory", b["peak_rss_mb"] - a["peak_rss_mb"]))
    for name, mb in rows:
        print(f"  {name:<40} {mb:9.1f} MB  {mb * 2**20 / docs:9.0f} B/document  {mb * 2**20 / reqs:7.0f} B/request")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the measurement here")
    ap.add_argument("--slope", nargs=2, metavar=("SMALL", "BIG"), help="compare two measurements")
    ap.add_argument("cli", nargs=argparse.REMAINDER, help="-- then the belief-eval arguments")
    args = ap.parse_args(argv)
    if args.slope:
        return slope(Path(args.slope[0]), Path(args.slope[1]))
    cli = args.cli[1:] if args.cli[:1] == ["--"] else args.cli
    measure(cli, Path(args.json or "memory_owners.json"))


if __name__ == "__main__":
    main()
