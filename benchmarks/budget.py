"""End-to-end time of a budgeted run against the full run, measured side by side (docs/budget.md).

Runs ``belief-eval`` on one task twice in one invocation, one after the other under the same machine
load: with ``--budget`` (default 5 %) and on every fact, both with ``--log_samples``; prints each
run's wall and CPU seconds (model loading included: what a user waits for), the requests each sent, the
ratios, and the budgeted run's estimates with their 95 % intervals beside the full run's values.
The full run's records are what ``scripts/budget_coverage.py --records`` reads.

    python -m benchmarks budget --task belief_qa_zeroshot \\
        --metadata '{"source": "sample", "confidence_prompts": 200, "confidence_samples": 10}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import measure, workloads
from benchmarks.workloads import ROOT


def run(args, label: str, metadata: dict, out: Path) -> dict:
    model_args = args.model_args or f"pretrained={workloads.model_path()},dtype=float32"
    cmd = measure.belief_eval(
        "--model",
        args.model,
        "--model_args",
        model_args,
        "--tasks",
        args.task,
        "--metadata",
        json.dumps(metadata),
        "--batch_size",
        str(args.batch_size),
        "--output_path",
        str(out),
        "--log_samples",
        "--no_answer_cache",
        *args.extra,
    )  # timed: every answer computed
    out.mkdir(parents=True, exist_ok=True)
    done = measure.run_child(cmd, measure.child_env(args.threads), out / "log.txt")
    if done["status"]:
        raise SystemExit(f"{label} run failed ({done['status']}); see {out / 'log.txt'}")
    results = json.loads(sorted(out.rglob("results_*.json"))[-1].read_text())
    samples = sorted(out.rglob(f"samples_{args.task}_*.jsonl"))[-1]
    requests = sum(len(json.loads(line)["resps"]) for line in samples.open())
    return {
        "label": label,
        "wall_s": done["wall_s"],
        "cpu_s": done["cpu_s"],
        "peak_mb": done["peak_mb"],
        "load": done["load"],
        "requests": requests,
        "docs": results["n-samples"][args.task]["effective"],
        "results": results["results"][args.task],
        "design": results["configs"][args.task]["metadata"].get("budget_design"),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="belief_qa_zeroshot")
    ap.add_argument("--metadata", default='{"source": "sample"}', help="task knobs (JSON) of both runs")
    ap.add_argument("--budget", type=float, default=0.05)
    ap.add_argument("--model", default="hf-shared")
    ap.add_argument("--model_args", default="", help="default: the bundled model, float32")
    ap.add_argument("--batch_size", default="8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench_budget")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more belief-eval arguments")
    args = ap.parse_args(argv)
    metadata = json.loads(args.metadata)
    runs = [
        run(args, f"budget {args.budget:g}", {**metadata, "budget": args.budget}, args.out / f"budget_{args.budget:g}"),
        run(args, "full", metadata, args.out / "full"),
    ]
    small, full = runs
    summary = {
        "task": args.task,
        "metadata": metadata,
        "model": args.model,
        "runs": runs,
        "wall_ratio": small["wall_s"] / full["wall_s"],
        "cpu_ratio": small["cpu_s"] / full["cpu_s"],
        "request_ratio": small["requests"] / full["requests"],
    }
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    for r in runs:
        print(
            f"{r['label']:>12}: {r['docs']:,} docs, {r['requests']:,} requests, "
            f"wall {r['wall_s']:.0f} s, CPU {r['cpu_s']:.0f} s, peak {r['peak_mb']:.0f} MiB, load {r['load']:.1f}"
        )
    print(
        f"ratio budget/full: wall {summary['wall_ratio']:.3f}, CPU {summary['cpu_ratio']:.3f}, "
        f"requests {summary['request_ratio']:.3f}"
    )
    for key, v in full["results"].items():
        name = key.split(",")[0]
        if "," in key and not name.endswith(("_stderr", "_ci95")) and isinstance(v, float):
            ci = small["results"].get(key.replace(",", "_ci95,", 1))
            est = small["results"].get(key)
            print(
                f"  {name}: full {v:.4f}; budget {est if not isinstance(est, float) else round(est, 4)} "
                f"[{', '.join(f'{x:.4f}' for x in ci) if ci else 'no interval'}]"
            )
