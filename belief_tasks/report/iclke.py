"""IC-LKE section (Wu et al.): model ranking (Table 7), per-relation heatmap across models
(Figure 5), subsumption rate η between models (section 4.2.2, Tables 1 and 10), Accuracy@K
curves (Figure 8).

Tasks ``belief_iclke*`` / ``belief_eiclke*``; records ``belief_tasks.scoring.iclke.IclkeRecord``, read
into arrays by ``belief_tasks.scoring.iclke.columns``. Breakdowns call ``belief_tasks.metrics.iclke``
and ``belief_tasks.metrics.comparison``; the known facts are ``belief_tasks.scoring.iclke.known_by_relation``.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.families import Family
from belief_tasks.metrics import iclke as iclke_metrics
from belief_tasks.metrics.comparison import mean_subsumption_rate
from belief_tasks.report.base import CardEntry, Context, MetricTable, Section, stderr, value
from belief_tasks.report.output import fmt, heatmap, line_plot, pm
from belief_tasks.scoring.iclke import columns, known_by_relation

TASK_RE = r"belief_e?iclke\w*"
PROBES = (TASK_RE,)
#: Table 7's columns: (metric, header)
TABLE7 = (("acc_macro", "Average accuracy ↑"), ("acc", "Accuracy (pooled) ↑"), ("gold_prob", "Gold probability ↑"))


def build(ctx: Context, family: Family) -> Section | None:
    found = ctx.tasks(TASK_RE)
    if not found:
        return None
    md = [
        f"## {family.title}\n",
        "In-context latent knowledge estimation (Wu et al.): examples of a relation as `subject object` pairs, then "
        "the test subject; the prediction is the option with the highest probability. Average accuracy = the mean of "
        "per-relation accuracies.\n",
    ]
    for tname in sorted({t.name for _, t in found}):
        runs = [(r, t) for r, t in found if t.name == tname]
        md += [f"### `{tname}`\n"] + _ranking(ctx, tname, runs)
        with_records = [(r, t) for r, t in runs if t.has_records]
        if not with_records:
            md.append("*Per-relation results, η and Accuracy@K need the per-sample files (`--log_samples`).*\n")
            continue
        md += _relations(ctx, tname, with_records) + _subsumption(ctx, tname, with_records)
        md += _accuracy_at_k(ctx, tname, with_records)
    return Section(family.title, "\n".join(md), _summary(ctx, found), _card(ctx, found, family.title))


def _ranking(ctx: Context, tname: str, runs) -> list[str]:
    """Table 7: the models ranked by average accuracy."""
    table = MetricTable(TABLE7)
    for run, task in runs:
        shown, _ = table.add({"Model": run.name}, ctx.numbers(run, tname), {"model": run.name, "task": tname})
        shown["Facts"] = len(task.records()) if task.has_records else task.n_samples.get("effective")
    order = sorted(range(len(table.raw)), key=lambda i: -_nan_low(table.raw[i]["acc_macro"]))
    ranked = pd.DataFrame([{"Rank": k + 1, **table.shown[i]} for k, i in enumerate(order)])
    csv = pd.DataFrame([{"rank": k + 1, **table.raw[i]} for k, i in enumerate(order)])
    return [
        "#### Model ranking (cf. Table 7)\n",
        ctx.writer.table(ranked, f"iclke_ranking_{tname}", table.note(), csv=csv),
    ]


def _relations(ctx: Context, tname: str, with_records) -> list[str]:
    """Figure 5: accuracy per relation and model, best-known relations first."""
    w = ctx.writer
    per_rel = pd.DataFrame(
        {r.name: iclke_metrics.per_relation_accuracy(*columns(t.records())) for r, t in with_records}
    )
    per_rel.index.name = "relation"
    per_rel = per_rel.loc[per_rel.mean(axis=1).sort_values(ascending=False).index]
    fig = heatmap(per_rel, f"IC-LKE accuracy per relation ({tname})", "model", "relation", "accuracy")
    return [
        "#### Accuracy per relation (cf. Figure 5)\n",
        w.figure(fig, f"iclke_relations_{tname}", "IC-LKE accuracy per relation"),
        w.table(per_rel.reset_index(), f"iclke_relations_{tname}", "Accuracy per relation."),
    ]


def _subsumption(ctx: Context, tname: str, with_records) -> list[str]:
    """Section 4.2.2: the subsumption rate η between every pair of models (two or more)."""
    if len(with_records) < 2:
        return []
    w = ctx.writer
    known = {r.name: known_by_relation(t.records()) for r, t in with_records}
    names = list(known)
    eta = pd.DataFrame(
        [[mean_subsumption_rate(known[a], known[b]) for b in names] for a in names], index=names, columns=names
    )
    fig = heatmap(eta, f"Subsumption rate η ({tname})", "θ2: also known by", "θ1: known by", "η(θ1 | θ2)")
    return [
        "#### Subsumption rate η (cf. section 4.2.2, Tables 1 and 10)\n",
        "η(row | column): of the facts the row model knows, the share the column model knows too, "
        "averaged over relations. η ≈ 1: the column model's knowledge contains the row model's.\n",
        w.figure(fig, f"iclke_subsumption_{tname}", "Subsumption rate"),
        w.table(eta.reset_index(names="known by"), f"iclke_subsumption_{tname}", "η per model pair."),
    ]


def _accuracy_at_k(ctx: Context, tname: str, with_records) -> list[str]:
    """Figure 8: accuracy on the facts whose prediction is at least K sure, and the share kept."""
    w = ctx.writer
    series, rows = [], []
    ks = list(iclke_metrics.THRESHOLDS)
    for run, task in with_records:
        lps, gold, _ = columns(task.records())
        accs = [iclke_metrics.accuracy_at_confidence(lps, gold, k) for k in ks]
        covs = [iclke_metrics.coverage_at_confidence(lps, k) for k in ks]
        series.append((run.name, ks, accs))
        rows += [
            {"model": run.name, "K": f"{k:.1f}", "accuracy@K": a, "share with confidence ≥ K": c}
            for k, a, c in zip(ks, accs, covs)
        ]
    fig = line_plot(
        series, f"Accuracy@K ({tname})", "confidence threshold K", "accuracy on facts with confidence ≥ K", "model"
    )
    return [
        "#### Accuracy@K (cf. Figure 8)\n",
        "Accuracy on the facts whose predicted option has normalised probability ≥ K; the table gives the "
        "share of facts kept. A calibrated model's curve rises with K.\n",
        w.figure(fig, f"iclke_acc_at_k_{tname}", "Accuracy at K"),
        w.table(pd.DataFrame(rows), f"iclke_acc_at_k_{tname}", "Accuracy@K and the share of facts kept."),
    ]


def _nan_low(x: float) -> float:
    return float("-inf") if x != x else x


def _card(ctx: Context, found, title: str) -> dict[str, list[CardEntry]]:
    card: dict[str, list[CardEntry]] = {}
    for run, task in found:
        n = ctx.numbers(run, task.name)
        entries = card.setdefault(run.name, [])
        entries.append(
            CardEntry(
                "accuracy",
                title,
                f"average accuracy [{task.name}]",
                pm(value(n, "acc_macro"), stderr(n, "acc_macro"), 3),
            )
        )
        entries.append(CardEntry("reliability", title, f"accuracy@0.5 [{task.name}]", fmt(value(n, "acc@0.5"), 3)))
    return card


def _summary(ctx: Context, found) -> list[str]:
    out = []
    for run, task in found:
        n = ctx.numbers(run, task.name)
        out.append(
            f"{run.name:<28} {task.name:<22} avg acc {pm(value(n, 'acc_macro'), stderr(n, 'acc_macro'))}  "
            f"acc {fmt(value(n, 'acc'))}"
        )
    return out
