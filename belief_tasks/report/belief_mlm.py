"""BELIEF for masked LMs (Zhao et al., v3 sections 2, 5.4; v1): the encoder rows of Table 17,
calibration, and the prompt-bias tasks.

Tasks ``belief_mlm_<dataset>`` (records ``belief_tasks.scoring.belief_mlm.MlmPromptRecord``) and
``belief_mlm_bias_<dataset>``. Headline numbers are the tasks' aggregations.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.report.base import CardEntry, Context, Section, stderr, value
from belief_tasks.report.belief_icl import plot_bins
from belief_tasks.report.output import fmt, line_plot, pm
from belief_tasks.scoring.belief_mlm import hits

FAMILY = "BELIEF (masked LMs)"
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


def build(ctx: Context) -> Section | None:
    found, bias = ctx.tasks(PROMPT_RE), ctx.tasks(BIAS_RE)
    if not found and not bias:
        return None
    w = ctx.writer
    md = [
        f"## {FAMILY}\n",
        "Masked-LM BELIEF: the object token's rank at the mask over every statement template and subject expression; "
        "Acc@k and its fluctuation over draws of one prompt per fact, Consist, Ovconf@1 with the top token's "
        "probability as confidence.\n",
    ]
    if found:
        shown, raw = [], []
        for run, task in found:
            n = ctx.numbers(run, task.name)
            row, raw_row = {"Model": run.name, "Task": task.name}, {"model": run.name, "task": task.name}
            for m, head in COLUMNS:
                row[head] = fmt(value(n, m)) if m.endswith(("range", "sd")) else pm(value(n, m), stderr(n, m))
                raw_row[m], raw_row[f"{m}_stderr"] = value(n, m), stderr(n, m)
            row["Prompts kept / dropped"] = (
                f"{fmt(value(n, 'prompts_kept'), 0)} / {fmt(value(n, 'prompts_dropped'), 0)}"
            )
            shown.append(row)
            raw.append(raw_row)
        md.append("### Accuracy, fluctuation, consistency, overconfidence (cf. v3 Table 17, encoder rows)\n")
        md.append(w.table(pd.DataFrame(shown), "belief_mlm_table17", csv=pd.DataFrame(raw)))

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
        if series:
            md.append("### Calibration\n")
            fig = line_plot(
                series,
                "Calibration of masked LMs (top-token probability)",
                "confidence (top-token probability)",
                "Acc@1 of the bin",
                "model",
                diagonal=True,
            )
            md.append(w.figure(fig, "belief_mlm_calibration", "Calibration of masked LMs"))
            md.append(w.table(pd.DataFrame(bins_rows), "belief_mlm_calibration_bins", "Calibration bins."))
    if bias:
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
        md.append("### Prompt bias with content-free subjects (cf. v3 section 5.4)\n")
        md.append(w.table(pd.DataFrame(rows), "belief_mlm_bias"))

    card: dict[str, list[CardEntry]] = {}
    for run, task in found:
        n = ctx.numbers(run, task.name)
        tag = f" [{task.name}]"
        card.setdefault(run.name, []).extend(
            [
                CardEntry("accuracy", FAMILY, f"Acc@1{tag}", pm(value(n, "acc@1"), stderr(n, "acc@1"), 3)),
                CardEntry(
                    "robustness",
                    FAMILY,
                    f"fluctuation SD / Consist{tag}",
                    f"{fmt(value(n, 'acc@1_sd'), 3)} / {fmt(value(n, 'consist'), 3)}",
                ),
                CardEntry("reliability", FAMILY, f"Ovconf@1{tag}", fmt(value(n, "overconf@1"), 3), "closer to 0"),
                CardEntry("coverage", FAMILY, f"Acc@10{tag}", fmt(value(n, "acc@10"), 3)),
            ]
        )
    summary = [
        f"{run.name:<28} {task.name:<22} Acc@1 {fmt(value(ctx.numbers(run, task.name), 'acc@1'))}"
        for run, task in found
    ]
    return Section(FAMILY, "\n".join(md), summary, card)
