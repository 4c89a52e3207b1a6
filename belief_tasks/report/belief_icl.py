"""BELIEF-ICL section (Zhao et al., v3): Table 17, calibration (Figures 2-3), coverage (Table 19),
knowledge sharing between models and settings (Figure 4, section 6.4).

Tasks ``belief_{mp,qa}_{zeroshot,4random,4relation,4template}``; records
``belief_tasks.scoring.belief_icl.BeliefICLRecord`` (one per pair, columns per prompt; read through
``prompt_columns`` / ``sampled_prompts``, which also take the one-prompt records of older logs). Headline numbers
are the tasks' own aggregations (``recompute``); the bins and the sharing matrix call
``belief_tasks.metrics.belief`` / ``belief_tasks.metrics.comparison``.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.metrics.comparison import subsumption_rate
from belief_tasks.report.base import CardEntry, Context, Section, stderr, value
from belief_tasks.report.output import fmt, heatmap, line_plot, pm
from belief_tasks.scoring.belief_icl import covered, prompt_columns, records_of, sampled_prompts

FAMILY = "BELIEF-ICL"
TASK_RE = r"belief_(mp|qa)_([a-z0-9]+)"
PROBES = (TASK_RE,)
SETTINGS = ("zeroshot", "4random", "4relation", "4template")
SETTING_LABEL = {"zeroshot": "zero-shot", "4random": "4-random", "4relation": "4-relation", "4template": "4-template"}
STYLE_LABEL = {"mp": "MP", "qa": "QA"}

#: Table 17's columns: (metric, header)
TABLE17 = (
    ("acc", "Acc@1 ↑"),
    ("acc_range", "Range ↓"),
    ("acc_sd", "SD ↓"),
    ("consist", "Consist ↑"),
    ("ovconf", "Ovconf"),
    ("one_word_ratio", "1-word ratio ↑"),
)
COVERAGE = (("coverage_average", "Average"), ("coverage_maximum", "Maximum"), ("coverage_oracle", "Oracle"))


def style_setting(task) -> tuple[str, str]:
    """("mp", "4template") of a ``TaskRun`` whose probe is ``belief_mp_4template`` (``belief_demo_mp_4template``
    too)."""
    _, style, setting = task.probe.split("_", 2)
    return style, setting


def _order(item) -> tuple:
    run_index, task = item
    style, setting = style_setting(task)
    return (run_index, style, SETTINGS.index(setting) if setting in SETTINGS else len(SETTINGS), setting)


def build(ctx: Context) -> Section | None:
    found = ctx.tasks(TASK_RE)
    if not found:
        return None
    index = {r.name: i for i, r in enumerate(ctx.runs)}
    found.sort(key=lambda rt: _order((index[rt[0].name], rt[1])))
    w = ctx.writer
    md = [
        f"## {FAMILY}\n",
        "In-context fact probes on MyriadLAMA-style prompts (Zhao et al., v3). One prompt = a fact, a template "
        "and a subject expression. Acc@1 is the mean of N draws of one prompt per fact; Range and SD are the "
        "fluctuation of those draws; Consist the agreement of a fact's answers across its prompts; Ovconf mean "
        "confidence minus accuracy (positive: overconfident).\n",
    ]

    # ---- Table 17
    shown, raw = [], []
    for run, task in found:
        nums = ctx.numbers(run, task.name)
        style, setting = style_setting(task)
        recs = task.records()
        row = {
            "Model": run.name,
            "Style": STYLE_LABEL.get(style, style),
            "Setting": SETTING_LABEL.get(setting, setting),
        }
        raw_row = dict(row, task=task.name)
        for m, head in TABLE17:
            row[head] = (
                pm(value(nums, m), stderr(nums, m))
                if m in ("acc", "consist", "ovconf", "one_word_ratio")
                else fmt(value(nums, m))
            )
            raw_row[m], raw_row[f"{m}_stderr"] = value(nums, m), stderr(nums, m)
        row["Facts"] = raw_row["facts"] = len({r["fact_id"] for r in recs}) if recs else None
        row["Prompts"] = raw_row["prompts"] = len(prompt_columns(recs).fact_ids) if recs else None
        shown.append(row)
        raw.append(raw_row)
    md.append("### Accuracy, fluctuation, consistency, overconfidence (cf. v3 Table 17)\n")
    md.append(
        w.table(
            pd.DataFrame(shown),
            "belief_icl_table17",
            "± = standard error over facts (Acc@1, Consist, 1-word ratio) or prompts (Ovconf).",
            csv=pd.DataFrame(raw),
        )
    )

    # ---- Table 19: coverage
    shown, raw = [], []
    for run, task in found:
        nums = ctx.numbers(run, task.name)
        style, setting = style_setting(task)
        row = {
            "Model": run.name,
            "Style": STYLE_LABEL.get(style, style),
            "Setting": SETTING_LABEL.get(setting, setting),
        }
        raw_row = dict(row, task=task.name)
        for m, head in COVERAGE:
            row[head] = pm(value(nums, m), stderr(nums, m))
            raw_row[m], raw_row[f"{m}_stderr"] = value(nums, m), stderr(nums, m)
        shown.append(row)
        raw.append(raw_row)
    md.append("### Knowledge coverage (cf. v3 Tables 8, 19)\n")
    md.append(
        "Average: mean accuracy over all prompts; Maximum: the best template of each relation; Oracle: a fact "
        "counts as known when any of its prompts is answered correctly.\n"
    )
    md.append(w.table(pd.DataFrame(shown), "belief_icl_coverage", csv=pd.DataFrame(raw)))

    # ---- calibration plots
    md.append("### Calibration (cf. v3 Figures 2, 3)\n")
    bins_rows, plotted = [], False
    for run in ctx.runs:
        for style in STYLE_LABEL:
            series = []
            for r, task in found:
                if r is not run or style_setting(task)[0] != style:
                    continue
                recs = task.records()
                conf, correct = sampled_prompts(recs)
                if not conf:
                    continue
                n_bins = plot_bins(int(recs[0].get("bins", belief_metrics.DEFAULT_BINS)), len(conf))
                bins = belief_metrics.calibration_bins(conf, correct, n_bins)
                setting = SETTING_LABEL.get(style_setting(task)[1], task.name)
                series.append(
                    (f"{setting} (n={len(conf)})", [b["confidence"] for b in bins], [b["accuracy"] for b in bins])
                )
                for i, b in enumerate(bins, 1):
                    bins_rows.append({"model": run.name, "task": task.name, "bin": i, **b})
            if series:
                fig = line_plot(
                    series,
                    f"Calibration, {STYLE_LABEL[style]}: {run.name}",
                    "confidence (share of sampled answers agreeing)",
                    "accuracy (Acc@1 of the bin)",
                    "context setting",
                    diagonal=True,
                )
                md.append(
                    w.figure(fig, f"belief_icl_calibration_{run.name}_{style}", f"Calibration {run.name} {style}")
                )
                plotted = True
    if plotted:
        md.append(
            f"Bins of equal size by descending confidence (the run's M, or fewer so that a bin holds at least "
            f"{MIN_BIN_SIZE} prompts); points below the diagonal are overconfident.\n"
        )
        md.append(w.table(pd.DataFrame(bins_rows), "belief_icl_calibration_bins", "Calibration bins."))
    else:
        md.append("*No sampled confidences in these runs (run with `confidence_samples` > 0).*\n")

    # ---- knowledge sharing (Figure 4)
    sharing_md = _sharing(ctx, found)
    if sharing_md:
        md.append(sharing_md)

    return Section(title=FAMILY, markdown="\n".join(md), summary=_summary(ctx, found), card=_card(ctx, found))


#: fewest prompts per calibration bin in the plots: smaller bins of tied confidences draw zigzags, not a curve
MIN_BIN_SIZE = 5


def plot_bins(n_bins: int, n_prompts: int) -> int:
    """The run's M bins, or fewer so that each holds at least MIN_BIN_SIZE prompts (Ovconf itself does not depend on
    M)."""
    return max(1, min(n_bins, n_prompts // MIN_BIN_SIZE))


def covered_facts(records: list) -> set:
    """v3 section 6.4's covered facts: (fact, template) combinations answered correctly (any subject expression)."""
    return covered(records_of(records))


def sharing_matrix(units: dict[str, set]) -> pd.DataFrame:
    """rate[row][col] = share of the row unit's covered facts that the column unit covers too."""
    names = list(units)
    return pd.DataFrame(
        [[subsumption_rate(units[a], units[b]) for b in names] for a in names], index=names, columns=names
    )


def _sharing(ctx: Context, found) -> str:
    md = []
    for style in STYLE_LABEL:
        units = {}
        for run, task in found:
            s, setting = style_setting(task)
            if s != style or not task.has_records:
                continue
            label = (
                SETTING_LABEL.get(setting, setting)
                if len(ctx.runs) == 1
                else f"{run.name} · {SETTING_LABEL.get(setting, setting)}"
            )
            units[label] = covered_facts(task.records())
        if len(units) < 2:
            continue
        mat = sharing_matrix(units)
        if not md:
            md.append("### Knowledge sharing between models and settings (cf. v3 Figure 4)\n")
            md.append(
                "Cell (row, column): the share of the facts the row covers (fact-template combinations "
                "answered correctly) that the column covers too.\n"
            )
        fig = heatmap(
            mat, f"Knowledge sharing rate, {STYLE_LABEL[style]}", "also covered by", "covered by", "sharing rate"
        )
        md.append(ctx.writer.figure(fig, f"belief_icl_sharing_{style}", f"Knowledge sharing {style}"))
        csv = mat.reset_index(names="covered by")
        md.append(ctx.writer.table(csv, f"belief_icl_sharing_{style}", f"Sharing rates, {STYLE_LABEL[style]}."))
    return "\n".join(md)


def _by_model_style(ctx: Context, found):
    out: dict = {}
    for run, task in found:
        style, setting = style_setting(task)
        out.setdefault(run.name, {}).setdefault(style, []).append(
            (SETTING_LABEL.get(setting, setting), ctx.numbers(run, task.name))
        )
    return out


def _card(ctx: Context, found) -> dict[str, list[CardEntry]]:
    def cells(items, metric, digits=3):
        return " · ".join(f"{lab} {fmt(value(n, metric), digits)}" for lab, n in items)

    card: dict[str, list[CardEntry]] = {}
    for model, styles in _by_model_style(ctx, found).items():
        entries = []
        for style, items in styles.items():
            S = STYLE_LABEL.get(style, style)
            entries += [
                CardEntry("accuracy", FAMILY, f"Acc@1 ({S})", cells(items, "acc")),
                CardEntry("robustness", FAMILY, f"fluctuation SD ({S})", cells(items, "acc_sd"), "lower"),
                CardEntry("robustness", FAMILY, f"Consist ({S})", cells(items, "consist")),
                CardEntry("reliability", FAMILY, f"Ovconf ({S})", cells(items, "ovconf"), "closer to 0"),
                CardEntry("coverage", FAMILY, f"oracle coverage ({S})", cells(items, "coverage_oracle")),
            ]
        card[model] = entries
    return card


def _summary(ctx: Context, found) -> list[str]:
    lines = []
    for run, task in found:
        n = ctx.numbers(run, task.name)
        lines.append(
            f"{run.name:<28} {task.name:<22} Acc@1 {fmt(value(n, 'acc'))}  SD {fmt(value(n, 'acc_sd'))}  "
            f"Consist {fmt(value(n, 'consist'))}  Ovconf {fmt(value(n, 'ovconf'))}"
        )
    return lines
