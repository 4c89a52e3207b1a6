"""Do EIC-LKE's per-relation accuracies track IC-LKE's? (appendix F / H.4)

Runs ``belief_iclke`` and ``belief_eiclke`` on the same test facts and options (bundled
sample by default, every relation) and prints per-relation accuracy and gold probability
of both, with their Pearson and Spearman correlations across relations.

    python -m benchmarks iclke_eic_agreement [--model hf-shared] [--max_facts 9] [--out agreement.json]

``hf-shared`` (prefix sharing) is the default: the stock ``hf`` backend gives the same
numbers but takes far longer.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import measure, workloads
from benchmarks.workloads import ROOT

sys.path.append(str(ROOT / "tests"))  # the tests' one call of lm-eval (harness.evaluate)


def per_relation(records, key):
    import numpy as np

    out: dict[str, list[float]] = {}
    for r in records:
        out.setdefault(r["relation"], []).append(float(r[key]))
    return {k: float(np.mean(v)) for k, v in sorted(out.items())}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="hf-shared")
    ap.add_argument("--model_args", default=None)
    ap.add_argument("--max_facts", type=int, default=9, help="test facts per relation")
    ap.add_argument("--metadata", default="{}", help="extra --metadata JSON (e.g. a bear_big_path and no source)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from belief_tasks.metrics import iclke as iclke_metrics
    from belief_tasks.scoring.iclke import columns

    from harness import evaluate

    model_args = args.model_args or f"pretrained={workloads.model_path()},device=cpu,dtype=float32"
    md = {"max_facts_per_relation": args.max_facts, **json.loads(args.metadata)}
    runs, timing = {}, {}
    for task in ("belief_iclke", "belief_eiclke"):
        res, wall, _ = measure.clocked(evaluate, [task], model_args, model=args.model, metadata=md, batch_size=8)
        timing[task] = round(wall, 1)
        runs[task] = [s["acc"] for s in res["samples"][task]]

    ic, eic = runs["belief_iclke"], runs["belief_eiclke"]
    assert sorted(r["fact_id"] for r in ic) == sorted(r["fact_id"] for r in eic), "both tasks must score the same facts"
    acc_ic, acc_eic = (
        iclke_metrics.per_relation_accuracy(*columns(ic)),
        iclke_metrics.per_relation_accuracy(*columns(eic)),
    )
    gp_ic, gp_eic = per_relation(ic, "gold_prob"), per_relation(eic, "gold_prob")
    r_acc, rho_acc, n = iclke_metrics.relation_agreement(acc_ic, acc_eic)
    r_gp, rho_gp, _ = iclke_metrics.relation_agreement(gp_ic, gp_eic)
    report = {
        "model": args.model,
        "metadata": md,
        "facts": len(ic),
        "relations": n,
        "seconds": timing,
        "acc": {
            "iclke": iclke_metrics.accuracy([r["logprobs"] for r in ic], [r["gold_index"] for r in ic]),
            "eiclke": iclke_metrics.accuracy([r["logprobs"] for r in eic], [r["gold_index"] for r in eic]),
        },
        "per_relation_accuracy": {rel: [acc_ic[rel], acc_eic[rel]] for rel in acc_ic},
        "per_relation_gold_prob": {rel: [round(gp_ic[rel], 4), round(gp_eic[rel], 4)] for rel in gp_ic},
        "accuracy_pearson": r_acc,
        "accuracy_spearman": rho_acc,
        "gold_prob_pearson": r_gp,
        "gold_prob_spearman": rho_gp,
    }
    print(f"{'relation':10} {'IC acc':>7} {'EIC acc':>8} {'IC p(gold)':>11} {'EIC p(gold)':>12}")
    for rel in acc_ic:
        print(f"{rel:10} {acc_ic[rel]:7.3f} {acc_eic[rel]:8.3f} {gp_ic[rel]:11.3f} {gp_eic[rel]:12.3f}")
    print(json.dumps({k: v for k, v in report.items() if not k.startswith("per_relation")}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
