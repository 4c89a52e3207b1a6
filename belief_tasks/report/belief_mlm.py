"""BELIEF for masked LMs (Zhao et al., v3 sections 2, 5.4; v1): the encoder rows of Table 17,
calibration, and the prompt-bias tasks.

Tasks ``belief_mlm_<dataset>`` (records ``belief_tasks.scoring.belief_mlm.MlmPromptRecord``) and
``belief_mlm_bias_<dataset>``. Headline numbers are the tasks' aggregations.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.families import Family
from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.report.base import CardEntry, Context, MetricTable, Section, stderr, value
from belief_tasks.report.belief_icl import plot_bins
from belief_tasks.report.output import fmt, line_plot, pm
from belief_tasks.scoring.belief_mlm import hits

PROMPT_RE = r"belief_mlm_(?!bias_)\w+"
BIAS_RE = r"belief_mlm_bias_\w+"
PROBES = (PROMPT_RE, BIAS_RE)
COLUMNS = (
    ("acc@1", "Acc@1 ↑"),
    ("acc@10", "Acc@10 ↑"),
    ("mrr", "MRR ↑"),
    ("acc@1_range", "Range ↓"),
    ("acc@1_sd", "SD ↓"),
    ("consist", "Consist ↑"),
    ("overconf@1", "Ovconf@1"),
)


def build(ctx: Context, family: Family) -> Section | None:
    found, bias = ctx.tasks(PROMPT_RE), ctx.tasks(BIAS_RE)
    if not found and not bias:
        return None
    md = [
        f"## {family.title}\n",
        "Masked-LM BELIEF: the object token's rank at the mask over every statement template and subject expression; "
        "Acc@k and its fluctuation over draws of one prompt per fact, Consist, Ovconf@1 with the top token's "
        "probability as confidence.\n",
    ]
    if found:
        md += _table17(ctx, found) + _calibration(ctx, found)
    if bias:
        md += _bias(ctx, bias)
    summary = [
        f"{run.name:<28} {task.name:<22} Acc@1 {fmt(value(ctx.numbers(run, task.name), 'acc@1'))}"
        for run, task in found
    ]
    return Section(family.title, "\n".join(md), summary, _card(ctx, found, family.title))


def _table17(ctx: Context, found) -> list[str]:
    """The encoder rows of Table 17, with the prompts kept and dropped."""
    table = MetricTable(COLUMNS)
    for run, task in found:
        n = ctx.numbers(run, task.name)
        shown, _ = table.add({"Model": run.name, "Task": task.name}, n, {"model": run.name, "task": task.name})
        shown["Prompts kept / dropped"] = f"{fmt(value(n, 'prompts_kept'), 0)} / {fmt(value(n, 'prompts_dropped'), 0)}"
    return [
        "### Accuracy, fluctuation, consistency, overconfidence (cf. v3 Table 17, encoder rows)\n",
        table.write(ctx.writer, "belief_mlm_table17"),
    ]


def _calibration(ctx: Context, found) -> list[str]:
    """Calibration with the top token's probability as confidence, one line per model (and task)."""
    series, bins_rows = [], []
    for run, task in found:
        recs = [r for r in task.records() if r.get("confidence") is not None]
        if not recs:
            continue
        bins = belief_metrics.calibration_bins(
            [r["confidence"] for r in recs], hits(recs), plot_bins(belief_metrics.DEFAULT_BINS, len(recs))
        )
        label = run.name if len({t.name for _, t in found}) == 1 else f"{run.name} · {task.name}"
        series.append((label, [b["confidence"] for b in bins], [b["accuracy"] for b in bins]))
        bins_rows += [{"model": run.name, "task": task.name, "bin": i, **b} for i, b in enumerate(bins, 1)]
    if not series:
        return []
    fig = line_plot(
        series,
        "Calibration of masked LMs (top-token probability)",
        "confidence (top-token probability)",
        "Acc@1 of the bin",
        "model",
        diagonal=True,
    )
    return [
        "### Calibration\n",
        ctx.writer.figure(fig, "belief_mlm_calibration", "Calibration of masked LMs"),
        ctx.writer.table(pd.DataFrame(bins_rows), "belief_mlm_calibration_bins", "Calibration bins."),
    ]


def _bias(ctx: Context, bias) -> list[str]:
    """The prompt-bias tasks: the divergence of the content-free prompts' candidate distributions."""
    rows = []
    for run, task in bias:
        n = ctx.numbers(run, task.name)
        rows.append(
            {
                "Model": run.name,
                "Task": task.name,
                "bias (single) ↓": value(n, "bias_single"),
                "bias (multi) ↓": value(n, "bias_multi"),
            }
        )
    return [
        "### Prompt bias with content-free subjects (cf. v3 section 5.4)\n",
        ctx.writer.table(pd.DataFrame(rows), "belief_mlm_bias"),
    ]


def _card(ctx: Context, found, title: str) -> dict[str, list[CardEntry]]:
    card: dict[str, list[CardEntry]] = {}
    for run, task in found:
        n = ctx.numbers(run, task.name)
        tag = f" [{task.name}]"
        card.setdefault(run.name, []).extend(
            [
                CardEntry("accuracy", title, f"Acc@1{tag}", pm(value(n, "acc@1"), stderr(n, "acc@1"), 3)),
                CardEntry(
                    "robustness",
                    title,
                    f"fluctuation SD / Consist{tag}",
                    f"{fmt(value(n, 'acc@1_sd'), 3)} / {fmt(value(n, 'consist'), 3)}",
                ),
                CardEntry("reliability", title, f"Ovconf@1{tag}", fmt(value(n, "overconf@1"), 3), "closer to 0"),
                CardEntry("coverage", title, f"Acc@10{tag}", fmt(value(n, "acc@10"), 3)),
            ]
        )
    return card
