"""MONITOR's cost against the paper's average accuracy, measured side by side in one run (cf. Table 8).

Runs ``belief_monitor`` with ``monitor_accuracy: paper`` once and times the three request groups
separately on the same model: MONITOR's scored anchors (R + 1 + M per fact), the greedy answers
under the positive context and the R frames (R + 1), and the R x M frame x negative-interference
answers of section 4.3's average accuracy. Each group goes to the backend as its own batch (the
wrapper splits lm-eval's ``generate_until`` call in two), so the seconds are the group's own. The
requests and tokens per group are the task's ``cost_*`` metrics (the results JSON's).

    python -m benchmarks monitor_cost                                   # bundled sample, 2 facts x 3 relations
    python -m benchmarks monitor_cost --fktc-path /data/MONITOR/FKTC --relations P1412 --facts 20

Prints requests, tokens, seconds (wall clock and process CPU time: on a shared machine CPU time is
the steadier) per group and the ratios R x M / anchors; the paper reports 2.97x fewer GPU hours for
MONITOR than for the average accuracy on P1412 (LLaMa-30b-ins., its anchors read from generations).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import measure, workloads

GROUPS = ("anchors", "answers", "interference")


class GroupTimer:
    """Wraps a backend's request methods: scoring requests count as anchors; greedy requests are split
    into the R x M prompts (the doc's ``interference`` texts) and the others, each timed on its own."""

    def __init__(self, lm):
        self.lm = lm
        self.wall = dict.fromkeys(GROUPS, 0.0)
        self.cpu = dict.fromkeys(GROUPS, 0.0)
        for name in ("loglikelihood", "per_token_loglikelihood"):
            if hasattr(lm, name):
                setattr(lm, name, self._timed(getattr(lm, name), "anchors"))
        self._generate = lm.generate_until
        lm.generate_until = self.generate_until

    def _timed(self, method, group: str):
        def run(requests, *args, **kwargs):
            out, wall, cpu = measure.clocked(method, requests, *args, **kwargs) if requests else ([], 0.0, 0.0)
            self.wall[group] += wall
            self.cpu[group] += cpu
            return out

        return run

    def generate_until(self, requests, *args, **kwargs):
        from belief_tasks.tasks.base import unpack

        def in_grid(r) -> bool:
            grid = r.doc.get("interference")
            return bool(grid) and r.arguments[0] in {q["text"] for q in unpack(r.doc, "interference")}

        split = {
            "answers": [r for r in requests if not in_grid(r)],
            "interference": [r for r in requests if in_grid(r)],
        }
        outs = {g: self._timed(self._generate, g)(rs, *args, **kwargs) for g, rs in split.items()}
        by_id = {id(r): o for g in split for r, o in zip(split[g], outs[g])}
        return [by_id[id(r)] for r in requests]


def run(args) -> dict:
    import torch

    import belief_tasks

    belief_tasks.install()
    from lm_eval import simple_evaluate
    from lm_eval.api.registry import get_model
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    model = str(args.model or workloads.model_path())
    meta = {
        "pretrained": model,
        "monitor_accuracy": "paper",
        "monitor_route": args.route,
        "max_facts_per_relation": args.facts,
        "relations": args.relations,
    }
    meta.update({"fktc_path": str(args.fktc_path)} if args.fktc_path else {"source": "sample"})
    lm = get_model(args.backend)(pretrained=model, dtype="float32", device="cpu", batch_size=args.batch_size)
    timer = GroupTimer(lm)
    out = simple_evaluate(
        model=lm,
        tasks=["belief_monitor"],
        task_manager=TaskManager(include_path=str(task_yamls_dir()), metadata=meta),
        metadata=meta,
        gen_kwargs=f"max_gen_toks={args.max_gen_toks}",
        verbosity="WARNING",
    )
    res = out["results"]["belief_monitor"]
    short = {"anchors": "anchor", "answers": "answer", "interference": "paper"}
    rows = {
        g: {
            "requests": res[f"cost_{short[g]}_requests,none"],
            "tokens": res[f"cost_{short[g]}_tokens,none"],
            "wall_s": timer.wall[g],
            "cpu_s": timer.cpu[g],
        }
        for g in GROUPS
    }
    ratios = {k: rows["interference"][k] / rows["anchors"][k] for k in ("requests", "tokens", "wall_s", "cpu_s")}
    return {
        "backend": args.backend,
        "route": args.route,
        "data": str(args.fktc_path or "sample"),
        "relations": args.relations,
        "facts": out["n-samples"]["belief_monitor"]["effective"],
        "acc_paper_avg": res.get("acc_paper_avg,none"),
        "monitor": res.get("monitor,none"),
        "groups": rows,
        "interference_over_anchors": ratios,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fktc-path", type=Path, default=None, help="FKTC folder (default: the bundled sample)")
    ap.add_argument("--relations", default="P17,P19,P36")
    ap.add_argument("--facts", type=int, default=2, help="max_facts_per_relation")
    ap.add_argument("--backend", default="hf-shared", choices=["hf", "hf-shared"])
    ap.add_argument("--route", default="per_token", choices=["prefix", "per_token"])
    ap.add_argument("--model", type=Path, default=None, help="causal model folder (default: the bundled one)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-gen-toks", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.backend == "hf" and args.route == "per_token":
        ap.error("stock hf has no per_token_loglikelihood: use --route prefix")
    report = run(args)
    print(f"{report['data']} {report['relations']}: {report['facts']} facts, {report['backend']} ({report['route']})")
    print(f"{'group':<14}{'requests':>10}{'tokens':>10}{'wall s':>10}{'cpu s':>10}")
    for g, r in report["groups"].items():
        print(f"{g:<14}{r['requests']:>10.0f}{r['tokens']:>10.0f}{r['wall_s']:>10.1f}{r['cpu_s']:>10.1f}")
    print("R x M / anchors: " + "  ".join(f"{k} {v:.2f}x" for k, v in report["interference_over_anchors"].items()))
    print(
        f"acc_paper_avg {report['acc_paper_avg']:.4f}  monitor {report['monitor']:.4f}  "
        "(paper, Table 8: 2.97x GPU hours)"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0
