"""Two runs of the same command on two backends (``hf-shared`` and ``vllm-shared``, say), compared within float
noise: every log-likelihood request by request, each document's prediction (its likeliest option), the greedy
texts, the sampled texts (equal only on the same sampler), and every metric of the results JSON, to 3 decimals.

    python scripts/compare_backends.py RUN_A RUN_B [--tolerance 5e-4] [--json OUT]

A run is an lm-eval output folder with ``--log_samples`` (the newest results JSON and samples files below it).
Metrics that come from sampled texts (Ovconf and what is derived from it) are listed apart: two engines draw
different samples from the same distribution (docs/backends_support.md). Exits 1 when a log-likelihood is further
apart than the tolerance, a prediction or a greedy text differs, or a metric not from samples differs at 3 decimals.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

#: metric names that come from sampled texts (BELIEF-ICL's Ovconf and its calibration)
SAMPLED_METRICS = ("ovconf", "calibration")


def newest(run: Path, pattern: str) -> list[Path]:
    found = sorted(run.rglob(pattern))
    if not found:
        raise SystemExit(f"{run}: no {pattern}")
    return found


def samples_of(run: Path) -> dict[str, list[dict]]:
    """Task -> its records (the newest samples file of each task), sorted by document."""
    out: dict[str, list[dict]] = {}
    for path in newest(run, "samples_*.jsonl"):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        out[task] = sorted((json.loads(line) for line in path.open()), key=lambda r: r["doc_id"])
    return out


def requests_of(record: dict) -> list[tuple[str, object]]:
    """(kind, answer) per request of a record: ("ll", log-likelihood), ("greedy" / "sampled", text)."""
    out: list[tuple[str, object]] = []
    arguments = record["arguments"]  # lm-eval 0.4 logs them as {"gen_args_0": {"arg_0": ..., "arg_1": ...}, ...}
    for args, resp in zip(arguments.values() if isinstance(arguments, dict) else arguments, record["resps"]):
        answer = resp[0]
        if isinstance(answer, (list, tuple)):
            out.append(("ll", float(answer[0])))
        else:
            kwargs = args.get("arg_1") if isinstance(args, dict) else args[1]
            out.append(("sampled" if isinstance(kwargs, dict) and kwargs.get("do_sample") else "greedy", answer))
    return out


def compare_samples(a: list[dict], b: list[dict]) -> dict:
    """Request-by-request gaps of one task's records on two backends."""
    if [r["doc_id"] for r in a] != [r["doc_id"] for r in b]:
        raise SystemExit("the runs hold different documents: not the same command")
    gaps, kinds = [], {"predictions": [0, 0], "greedy": [0, 0], "sampled": [0, 0]}
    for ra, rb in zip(a, b):
        qa, qb = requests_of(ra), requests_of(rb)
        lls_a = [float(v) for k, v in qa if k == "ll"]  # type: ignore[arg-type]
        lls_b = [float(v) for k, v in qb if k == "ll"]  # type: ignore[arg-type]
        gaps += [abs(x - y) for x, y in zip(lls_a, lls_b)]
        if len(lls_a) > 1:
            kinds["predictions"][0] += lls_a.index(max(lls_a)) == lls_b.index(max(lls_b))
            kinds["predictions"][1] += 1
        for kind in ("greedy", "sampled"):
            pairs = [(x, y) for (k, x), (_, y) in zip(qa, qb) if k == kind]
            kinds[kind][0] += sum(x == y for x, y in pairs)
            kinds[kind][1] += len(pairs)
    return {"log_likelihoods": len(gaps), "max_gap": max(gaps, default=0.0), **{k: tuple(v) for k, v in kinds.items()}}


def compare_metrics(a: dict, b: dict) -> list[dict]:
    """Every numeric metric of both results JSONs (standard errors and intervals left out): both values, the gap,
    whether they agree to 3 decimals, and whether the metric comes from sampled texts."""
    rows = []
    for task, metrics in sorted(a["results"].items()):
        for name, x in sorted(metrics.items()):
            y = b["results"].get(task, {}).get(name)
            numeric = isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool)
            if not numeric or "stderr" in name or "_ci95" in name or (math.isnan(x) and math.isnan(y)):
                continue
            sampled = any(s in name for s in SAMPLED_METRICS)
            same = round(float(x), 3) == round(float(y), 3)
            row = {"task": task, "metric": name, "a": x, "b": y, "gap": abs(x - y), "same_3dp": same}
            rows.append({**row, "sampled": sampled})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--tolerance", type=float, default=5e-4, help="nats per log-likelihood (default 5e-4)")
    parser.add_argument("--json", type=Path, help="write the comparison here")
    args = parser.parse_args(argv)
    sa, sb = samples_of(args.run_a), samples_of(args.run_b)
    tasks = {t: compare_samples(sa[t], sb[t]) for t in sorted(sa) if t in sb}
    results = [json.loads(newest(r, "results_*.json")[-1].read_text()) for r in (args.run_a, args.run_b)]
    metrics = compare_metrics(*results)
    print(
        "| task | log-likelihoods | largest gap (nats) | predictions equal | greedy texts equal | sampled texts equal |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for task, c in tasks.items():
        cells = [f"{c[k][0]} of {c[k][1]}" for k in ("predictions", "greedy", "sampled")]
        print(f"| {task} | {c['log_likelihoods']} | {c['max_gap']:.2e} | {' | '.join(cells)} |")
    differ = [m for m in metrics if not m["same_3dp"]]
    own = sum(not m["sampled"] for m in metrics)
    print(f"\nmetrics: {len(metrics)} compared, {own} not from sampled texts; differing at 3 decimals:")
    for m in differ:
        origin = " (from sampled texts)" if m["sampled"] else ""
        print(f"  {m['task']} {m['metric']}: {m['a']:.4f} vs {m['b']:.4f}{origin}")
    if args.json:
        args.json.write_text(json.dumps({"tasks": tasks, "metrics": metrics}, indent=1))
    failed = any(
        c["max_gap"] > args.tolerance or c["predictions"][0] != c["predictions"][1] or c["greedy"][0] != c["greedy"][1]
        for c in tasks.values()
    ) or any(not m["sampled"] for m in differ)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
