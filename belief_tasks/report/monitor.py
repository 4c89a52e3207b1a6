"""MONITOR section (Wang et al., 2024): Table 4 (MONITOR, avg/max/min accuracy, primary-anchor
probability, with r(MONITOR, avg acc) across models), r(MONITOR, avg acc) across the relations of
each model, Table 11 (MONITOR per relation x model), Table 12 (the correlation per relation across
models) and Table 8's cost comparison (requests and tokens of the anchors vs the R x M generations).

"avg acc" is the paper's (section 4.3: the R x M frame x negative-interference answers,
``monitor_accuracy: paper``) wherever every compared run has it, else the frame-only average
(``acc_avg``); each table says which.

Tasks ``belief_monitor`` (FKTC, or the run's source; relations chosen with ``relations``),
``belief_monitor_sample`` and their variants (e.g. ``belief_demo_monitor``). A task's numbers
are its recomputed results (``Context.numbers``, checked against the results JSON); per-relation
numbers are the task's own aggregations (``belief_tasks.scoring.monitor.per_relation``) on the records
of one relation. The aggregations average per-relation values without weights, as Table 4 does,
so the mean of Table 11's column is Table 4's value.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.families import Family
from belief_tasks.metrics.comparison import correlation
from belief_tasks.report.base import CardEntry, Context, MetricTable, Section, value
from belief_tasks.report.output import fmt, heatmap
from belief_tasks.scoring.monitor import has_paper_accuracy, per_relation

TASK_RE = r"belief_monitor\w*"
PROBES = (TASK_RE,)
TABLE4 = (
    ("monitor", "MONITOR ↓"),
    ("acc_paper_avg", "avg acc (R×M) ↑"),
    ("acc_paper_max", "max acc (R×M) ↑"),
    ("acc_paper_min", "min acc (R×M) ↑"),
    ("primary_prob", "probs ↑"),
    ("pfd", "PFD ↓"),
    ("ird", "IRD ↓"),
    ("acc_avg", "avg acc (frames) ↑"),
    ("acc_max", "max acc (frames) ↑"),
    ("acc_min", "min acc (frames) ↑"),
)
#: the two average accuracies, as the tables name them
ACCURACY_LABEL = {
    "acc_paper_avg": "avg acc over R×M frame-interference answers (section 4.3)",
    "acc_avg": "avg acc over the frames without interference (not the paper's)",
}


def accuracy_metric(record_sets: list[list[dict]]) -> str:
    """The average accuracy to compare MONITOR with: the paper's when every run has it, else the frames'."""
    return "acc_paper_avg" if record_sets and all(map(has_paper_accuracy, record_sets)) else "acc_avg"


def _pid_order(rel: str):
    return (0, int(rel[1:])) if rel[1:].isdigit() else (1, rel)


def relations_of(records: list[dict]) -> list[str]:
    return sorted({r["relation"] for r in records}, key=_pid_order)


def build(ctx: Context, family: Family) -> Section | None:
    found = [(run, t) for run, t in ctx.tasks(TASK_RE) if t.has_records]
    title = family.title
    if not found:
        if ctx.tasks(TASK_RE):
            return Section(title, f"## {title}\n\n*MONITOR results need the per-sample files (`--log_samples`).*\n")
        return None
    md = [
        f"## {title}\n",
        "Factual reliability (Wang et al., 2024): how far the gold object's subword probabilities move under other "
        "prompt frames (PFD) and under misleading contexts (IRD), per unit of probability under the positive context. "
        "Lower MONITOR is better. Accuracy (R×M): the paper's, greedy answers under every prompt frame behind every "
        "negative context (section 4.3; `monitor_accuracy: paper`), avg over the R×M combinations and its range "
        "[min, max], each relation alone, then averaged over relations; accuracy (frames): the same over the frames "
        "without interference; probs: mean primary-anchor probability.\n",
    ]
    rows = []
    for tname in sorted({t.name for _, t in found}):
        runs = [(run, t) for run, t in found if t.name == tname]
        md.append(f"### `{tname}`\n")
        raw = _table4(ctx, tname, runs, md)
        rows += raw
        _per_relation(ctx, tname, runs, md)
        _cost(ctx, tname, runs, md)
    return Section(title, "\n".join(md), _summary(rows), _card(rows, title))


def _table4(ctx: Context, tname: str, runs: list, md: list[str]) -> list[dict]:
    """Table 4's rows (one per model) into ``md``; returns the raw numbers."""
    table = MetricTable(TABLE4)
    for run, task in runs:
        shown, raw_row = table.add({"Model": run.name}, ctx.numbers(run, tname), {"model": run.name, "suite": tname})
        records = task.records("monitor")
        shown["Facts"] = raw_row["facts"] = len(records)
        shown["Relations"] = raw_row["relations"] = len(relations_of(records))
    raw = table.raw
    # a run without the R x M answers (monitor_accuracy frames / none) shows no empty R x M columns
    unasked = [head for m, head in TABLE4 if all(pd.isna(x[m]) for x in raw)]
    caption = (
        "± = bootstrap standard error over facts; max / min: each relation's best and worst "
        "prompt combination, averaged over relations."
    )
    md.append("#### Summary (cf. Table 4)\n")
    md.append(
        ctx.writer.table(
            pd.DataFrame(table.shown).drop(columns=unasked),
            f"monitor_table4_{tname}",
            f"{caption} {table.note()}".strip(),
            csv=pd.DataFrame(raw),
        )
    )
    acc = accuracy_metric([task.records("monitor") for _, task in runs])
    for x in raw:
        x["accuracy"] = acc
    if len(raw) >= 3:
        r, p, k = correlation([x["monitor"] for x in raw], [x[acc] for x in raw])
        md.append(
            f"Pearson r(MONITOR, avg acc) = **{fmt(r, 3)}** (p = {fmt(p, 3)}, n = {k} models). "
            f"Accuracy: {ACCURACY_LABEL[acc]}; Table 4 reports -0.846 over 12 models.\n"
        )
    elif len(raw) == 2:
        md.append("*r(MONITOR, avg acc) across models needs at least three models.*\n")
    return raw


def _relation_table(records: dict[str, list[dict]], metric: str, relations: list[str]) -> pd.DataFrame:
    """``metric`` per relation (rows) and model (columns); NaN where a model has no record of a relation."""
    values = {m: per_relation(recs, metric) for m, recs in records.items()}
    df = pd.DataFrame({m: {rel: v.get(rel, float("nan")) for rel in relations} for m, v in values.items()}).loc[
        relations
    ]
    df.index.name = "relation"
    return df


def _per_relation(ctx: Context, tname: str, runs: list, md: list[str]) -> None:
    """Table 11 (MONITOR and avg acc per relation x model, with a heatmap), r across each model's relations
    and, with >= 3 models, Table 12 (r per relation across models)."""
    w = ctx.writer
    records = {run.name: task.records("monitor") for run, task in runs}
    relations = sorted({rel for recs in records.values() for rel in relations_of(recs)}, key=_pid_order)
    acc_metric = accuracy_metric(list(records.values()))
    mon, acc = _relation_table(records, "monitor", relations), _relation_table(records, acc_metric, relations)
    md.append("#### MONITOR per relation (cf. Table 11)\n")
    vmax = max(1.0, float(pd.to_numeric(mon.stack(), errors="coerce").max() if mon.size else 1.0))
    fig = heatmap(
        mon, f"MONITOR per relation ({tname}); lower is better", "model", "relation", "MONITOR", vmin=0.0, vmax=vmax
    )
    md.append(w.figure(fig, f"monitor_relations_{tname}", "MONITOR per relation"))
    both = mon.add_suffix(" MONITOR").join(acc.add_suffix(" avg acc"))
    md.append(
        w.table(
            both.reset_index(), f"monitor_table11_{tname}", f"MONITOR and {ACCURACY_LABEL[acc_metric]}, per relation."
        )
    )
    _across_relations(w, tname, mon, acc, acc_metric, md)
    if len(runs) >= 3:
        rows = []
        for rel in relations:
            r, p, n = correlation(mon.loc[rel].to_numpy(), acc.loc[rel].to_numpy())
            rows.append({"relation": rel, "Pearson r": r, "p-value": p, "models": n})
        md.append("#### r(MONITOR, avg acc) per relation across models (cf. Table 12)\n")
        md.append(w.table(pd.DataFrame(rows), f"monitor_table12_{tname}", f"Accuracy: {ACCURACY_LABEL[acc_metric]}."))


def _across_relations(w, tname: str, mon: pd.DataFrame, acc: pd.DataFrame, acc_metric: str, md: list[str]) -> None:
    """Pearson r between MONITOR and avg acc across the relations of each model (the paper reports it across
    models, Table 4, and per relation across models, Table 12; one model's relations are the view one run gives)."""
    rows = []
    for model in mon.columns:
        r, p, n = correlation(mon[model].to_numpy(), acc[model].to_numpy())
        rows.append({"model": model, "Pearson r": r, "p-value": p, "relations": n})
    md.append("#### r(MONITOR, avg acc) across relations, per model\n")
    md.append(
        w.table(
            pd.DataFrame(rows),
            f"monitor_relation_correlation_{tname}",
            f"Accuracy: {ACCURACY_LABEL[acc_metric]}. Needs three relations or more (NaN otherwise).",
        )
    )


def _cost(ctx: Context, tname: str, runs: list, md: list[str]) -> None:
    """Table 8's comparison, measured: requests and tokens of MONITOR's anchors against the R x M answers."""
    rows = []
    for run, _ in runs:
        n = ctx.numbers(run, tname)
        row = {"model": run.name}
        for group, head in (("anchor", "anchors"), ("answer", "answers R+1"), ("paper", "R×M answers")):
            for unit in ("requests", "tokens"):
                count = value(n, f"cost_{group}_{unit}")
                row[f"{head} {unit}"] = count if pd.isna(count) else int(count)
        row["R×M / anchors (requests)"] = row["R×M answers requests"] / row["anchors requests"]
        row["R×M / anchors (tokens)"] = row["R×M answers tokens"] / row["anchors tokens"]
        rows.append(row)
    if all(pd.isna(r["anchors requests"]) for r in rows):
        return
    md.append("#### Cost: anchors vs the R×M accuracy answers (cf. Table 8)\n")
    md.append(
        ctx.writer.table(
            pd.DataFrame(rows),
            f"monitor_cost_{tname}",
            "Requests and tokens (prompt and scored answer, plus generated) per request group, "
            "summed over facts; Table 8 reports 2.97x fewer GPU hours for MONITOR on P1412.",
        )
    )


def _card(rows: list[dict], title: str) -> dict[str, list[CardEntry]]:
    card: dict[str, list[CardEntry]] = {}
    for x in rows:
        tag = "" if sum(y["model"] == x["model"] for y in rows) == 1 else f" [{x['suite']}]"
        card.setdefault(x["model"], []).extend(
            [
                CardEntry(
                    "accuracy",
                    title,
                    ("avg accuracy (R×M)" if x["accuracy"] == "acc_paper_avg" else "avg accuracy over frames") + tag,
                    fmt(x[x["accuracy"]], 3),
                ),
                CardEntry("robustness", title, f"PFD / IRD{tag}", f"{fmt(x['pfd'], 3)} / {fmt(x['ird'], 3)}", "lower"),
                CardEntry("reliability", title, f"MONITOR{tag}", fmt(x["monitor"], 3), "lower"),
            ]
        )
    return card


def _summary(rows: list[dict]) -> list[str]:
    return [
        f"{x['model']:<28} {x['suite']:<22} MONITOR {fmt(x['monitor'])}  "
        f"avg acc{' (R×M)' if x['accuracy'] == 'acc_paper_avg' else ''} {fmt(x[x['accuracy']])}  "
        f"probs {fmt(x['primary_prob'])}"
        for x in rows
    ]
