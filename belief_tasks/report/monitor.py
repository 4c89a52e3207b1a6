"""MONITOR section (Wang et al., 2024): Table 4 (MONITOR, avg/max/min accuracy, primary-anchor
probability, with r(MONITOR, avg acc) across models), Table 11 (MONITOR per relation x model),
Table 12 (the correlation per relation).

Tasks ``belief_monitor`` (FKTC, or the run's source; relations chosen with ``relations``),
``belief_monitor_sample`` and their variants (e.g. ``belief_demo_monitor``). A task's numbers
are its recomputed results (``Context.numbers``, checked against the results JSON); per-relation
numbers are the task's own aggregations (``belief_tasks.scoring.monitor.per_relation``) on the records
of one relation. The aggregations average per-relation values without weights, as Table 4 does,
so the mean of Table 11's column is Table 4's value.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.metrics.comparison import correlation
from belief_tasks.report.base import CardEntry, Context, Section, stderr, value
from belief_tasks.report.output import fmt, heatmap, pm
from belief_tasks.scoring.monitor import per_relation

FAMILY = "MONITOR"
TASK_RE = r"belief_monitor\w*"
PROBES = (TASK_RE,)
TABLE4 = (("monitor", "MONITOR ↓"), ("acc_avg", "avg acc ↑"), ("acc_max", "max acc ↑"), ("acc_min", "min acc ↑"),
          ("primary_prob", "probs ↑"), ("pfd", "PFD ↓"), ("ird", "IRD ↓"))


def _pid_order(rel: str):
    return (0, int(rel[1:])) if rel[1:].isdigit() else (1, rel)


def relations_of(records: list[dict]) -> list[str]:
    return sorted({r["relation"] for r in records}, key=_pid_order)


def build(ctx: Context) -> Section | None:
    found = [(run, t) for run, t in ctx.tasks(TASK_RE) if t.has_records]
    if not found:
        if ctx.tasks(TASK_RE):
            return Section(FAMILY, f"## {FAMILY}\n\n*MONITOR results need the per-sample files (`--log_samples`).*\n")
        return None
    md = [f"## {FAMILY}\n",
          "Factual reliability (Wang et al., 2024): how far the gold object's subword probabilities move under other "
          "prompt frames (PFD) and under misleading contexts (IRD), per unit of probability under the positive context. "
          "Lower MONITOR is better. Accuracy: greedy answers under the prompt frames; avg/max/min over frames, each "
          "averaged over relations; probs: mean primary-anchor probability.\n"]
    rows = []
    for tname in sorted({t.name for _, t in found}):
        runs = [(run, t) for run, t in found if t.name == tname]
        md.append(f"### `{tname}`\n")
        raw = _table4(ctx, tname, runs, md)
        rows += raw
        _per_relation(ctx, tname, runs, md)
    return Section(FAMILY, "\n".join(md), _summary(rows), _card(rows))


def _table4(ctx: Context, tname: str, runs: list, md: list[str]) -> list[dict]:
    """Table 4's rows (one per model) into ``md``; returns the raw numbers."""
    shown, raw = [], []
    for run, task in runs:
        n = ctx.numbers(run, tname)
        row, raw_row = {"Model": run.name}, {"model": run.name, "suite": tname}
        for m, head in TABLE4:
            row[head] = pm(value(n, m), stderr(n, m))
            raw_row[m], raw_row[f"{m}_stderr"] = value(n, m), stderr(n, m)
        records = task.records("monitor")
        row["Facts"] = raw_row["facts"] = len(records)
        row["Relations"] = raw_row["relations"] = len(relations_of(records))
        shown.append(row)
        raw.append(raw_row)
    md.append("#### Summary (cf. Table 4)\n")
    md.append(ctx.writer.table(pd.DataFrame(shown), f"monitor_table4_{tname}", "± = bootstrap standard error over facts.",
                               csv=pd.DataFrame(raw)))
    if len(raw) >= 3:
        r, p, k = correlation([x["monitor"] for x in raw], [x["acc_avg"] for x in raw])
        md.append(f"Pearson r(MONITOR, avg acc) = **{fmt(r, 3)}** (p = {fmt(p, 3)}, n = {k} models).\n")
    elif len(raw) == 2:
        md.append("*r(MONITOR, avg acc) across models needs at least three models.*\n")
    return raw


def _relation_table(records: dict[str, list[dict]], metric: str, relations: list[str]) -> pd.DataFrame:
    """``metric`` per relation (rows) and model (columns); NaN where a model has no record of a relation."""
    values = {m: per_relation(recs, metric) for m, recs in records.items()}
    return pd.DataFrame({m: {rel: v.get(rel, float("nan")) for rel in relations} for m, v in values.items()}).loc[relations]


def _per_relation(ctx: Context, tname: str, runs: list, md: list[str]) -> None:
    """Table 11 (MONITOR and avg acc per relation x model, with a heatmap) and, with >= 3 models, Table 12."""
    w = ctx.writer
    records = {run.name: task.records("monitor") for run, task in runs}
    relations = sorted({rel for recs in records.values() for rel in relations_of(recs)}, key=_pid_order)
    mon = _relation_table(records, "monitor", relations)
    acc = _relation_table(records, "acc_avg", relations)
    mon.index.name = acc.index.name = "relation"
    md.append("#### MONITOR per relation (cf. Table 11)\n")
    vmax = max(1.0, float(pd.to_numeric(mon.stack(), errors="coerce").max() if mon.size else 1.0))
    fig = heatmap(mon, f"MONITOR per relation ({tname}); lower is better", "model", "relation", "MONITOR", vmin=0.0, vmax=vmax)
    md.append(w.figure(fig, f"monitor_relations_{tname}", "MONITOR per relation"))
    both = mon.add_suffix(" MONITOR").join(acc.add_suffix(" avg acc"))
    md.append(w.table(both.reset_index(), f"monitor_table11_{tname}", "MONITOR and average accuracy per relation."))
    if len(runs) >= 3:
        rows = []
        for rel in relations:
            r, p, n = correlation(mon.loc[rel].to_numpy(), acc.loc[rel].to_numpy())
            rows.append({"relation": rel, "Pearson r": r, "p-value": p, "models": n})
        md.append("#### r(MONITOR, avg acc) per relation (cf. Table 12)\n")
        md.append(w.table(pd.DataFrame(rows), f"monitor_table12_{tname}"))


def _card(rows: list[dict]) -> dict[str, list[CardEntry]]:
    card: dict[str, list[CardEntry]] = {}
    for x in rows:
        tag = "" if sum(y["model"] == x["model"] for y in rows) == 1 else f" [{x['suite']}]"
        card.setdefault(x["model"], []).extend([
            CardEntry("accuracy", FAMILY, f"avg accuracy over frames{tag}", fmt(x["acc_avg"], 3)),
            CardEntry("robustness", FAMILY, f"PFD / IRD{tag}", f"{fmt(x['pfd'], 3)} / {fmt(x['ird'], 3)}", "lower"),
            CardEntry("reliability", FAMILY, f"MONITOR{tag}", fmt(x["monitor"], 3), "lower"),
        ])
    return card


def _summary(rows: list[dict]) -> list[str]:
    return [f"{x['model']:<28} {x['suite']:<22} MONITOR {fmt(x['monitor'])}  avg acc {fmt(x['acc_avg'])}  "
            f"probs {fmt(x['primary_prob'])}" for x in rows]
