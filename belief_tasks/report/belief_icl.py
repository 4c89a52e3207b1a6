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

from belief_tasks.families import Family
from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.metrics.comparison import subsumption_rate
from belief_tasks.report.base import CardEntry, Context, MetricTable, Section, value
from belief_tasks.report.loading import TaskRun
from belief_tasks.report.output import fmt, heatmap, line_plot
from belief_tasks.scoring.belief_icl import covered, prompt_columns, records_of, sampled_prompts

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


def build(ctx: Context, family: Family) -> Section | None:
    found = ctx.tasks(TASK_RE)
    if not found:
        return None
    index = {r.name: i for i, r in enumerate(ctx.runs)}
    found.sort(key=lambda rt: _order((index[rt[0].name], rt[1])))
    md = [
        f"## {family.title}\n",
        "In-context fact probes on MyriadLAMA-style prompts (Zhao et al., v3). One prompt = a fact, a template "
        "and a subject expression. Acc@1 is the mean of N draws of one prompt per fact; Range and SD are the "
        "fluctuation of those draws; Consist the agreement of a fact's answers across its prompts; Ovconf mean "
        "confidence minus accuracy (positive: overconfident).\n",
    ]
    md += _table17(ctx, found) + _coverage(ctx, found) + _calibration(ctx, found)
    sharing_md = _sharing(ctx, found)  # knowledge sharing (Figure 4)
    if sharing_md:
        md.append(sharing_md)
    return Section(family.title, "\n".join(md), _summary(ctx, found), _card(ctx, found, family.title))


def _labels(run, task) -> dict[str, str]:
    style, setting = style_setting(task)
    return {"Model": run.name, "Style": STYLE_LABEL.get(style, style), "Setting": SETTING_LABEL.get(setting, setting)}


def _table17(ctx: Context, found) -> list[str]:
    """Table 17: Acc@1, its fluctuation, Consist, Ovconf, the 1-word ratio, facts and prompts."""
    table = MetricTable(TABLE17)
    for run, task in found:
        labels = _labels(run, task)
        shown, raw = table.add(labels, ctx.numbers(run, task.name), dict(labels, task=task.name))
        recs = task.records()
        shown["Facts"] = raw["facts"] = len({r["fact_id"] for r in recs}) if recs else None
        shown["Prompts"] = raw["prompts"] = len(prompt_columns(recs).fact_ids) if recs else None
    return [
        "### Accuracy, fluctuation, consistency, overconfidence (cf. v3 Table 17)\n",
        table.write(
            ctx.writer,
            "belief_icl_table17",
            "± = standard error over facts (Acc@1, Consist, 1-word ratio) or prompts (Ovconf).",
        ),
    ]


def _coverage(ctx: Context, found) -> list[str]:
    """Table 19: knowledge coverage (average, maximum, oracle)."""
    table = MetricTable(COVERAGE)
    for run, task in found:
        labels = _labels(run, task)
        table.add(labels, ctx.numbers(run, task.name), dict(labels, task=task.name))
    return [
        "### Knowledge coverage (cf. v3 Tables 8, 19)\n",
        "Average: mean accuracy over all prompts; Maximum: the best template of each relation; Oracle: a fact "
        "counts as known when any of its prompts is answered correctly.\n",
        table.write(ctx.writer, "belief_icl_coverage"),
    ]


def _calibration(ctx: Context, found) -> list[str]:
    """Figures 2-3: one calibration plot per model and style (a line per context setting), and the bins."""
    md = ["### Calibration (cf. v3 Figures 2, 3)\n"]
    bins_rows: list[dict] = []
    for run in ctx.runs:
        for style in STYLE_LABEL:
            series = _calibration_series(run, [t for r, t in found if r is run and style_setting(t)[0] == style])
            for _, bins, task in series:
                bins_rows += [{"model": run.name, "task": task.name, "bin": i, **b} for i, b in enumerate(bins, 1)]
            if series:
                md.append(_calibration_figure(ctx, run, style, series))
    if not bins_rows:
        return md + ["*No sampled confidences in these runs (run with `confidence_samples` > 0).*\n"]
    return md + [
        f"Bins of equal size by descending confidence (the run's M, or fewer so that a bin holds at least "
        f"{MIN_BIN_SIZE} prompts); points below the diagonal are overconfident.\n",
        ctx.writer.table(pd.DataFrame(bins_rows), "belief_icl_calibration_bins", "Calibration bins."),
    ]


def _calibration_figure(ctx: Context, run, style: str, series: list) -> str:
    fig = line_plot(
        [(label, [b["confidence"] for b in bins], [b["accuracy"] for b in bins]) for label, bins, _ in series],
        f"Calibration, {STYLE_LABEL[style]}: {run.name}",
        "confidence (share of sampled answers agreeing)",
        "accuracy (Acc@1 of the bin)",
        "context setting",
        diagonal=True,
    )
    return ctx.writer.figure(fig, f"belief_icl_calibration_{run.name}_{style}", f"Calibration {run.name} {style}")


def _calibration_series(run, tasks: list[TaskRun]) -> list[tuple[str, list[dict], TaskRun]]:
    """(label, bins, task) of each of ``tasks`` (one model and style) with sampled confidences."""
    out = []
    for task in tasks:
        recs = task.records()
        conf, correct = sampled_prompts(recs)
        if not conf:
            continue
        n_bins = plot_bins(int(recs[0].get("bins", belief_metrics.DEFAULT_BINS)), len(conf))
        setting = SETTING_LABEL.get(style_setting(task)[1], task.name)
        out.append((f"{setting} (n={len(conf)})", belief_metrics.calibration_bins(conf, correct, n_bins), task))
    return out


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
    md: list[str] = []
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


def _card(ctx: Context, found, title: str) -> dict[str, list[CardEntry]]:
    def cells(items, metric, digits=3):
        return " · ".join(f"{lab} {fmt(value(n, metric), digits)}" for lab, n in items)

    card: dict[str, list[CardEntry]] = {}
    for model, styles in _by_model_style(ctx, found).items():
        entries = []
        for style, items in styles.items():
            S = STYLE_LABEL.get(style, style)
            entries += [
                CardEntry("accuracy", title, f"Acc@1 ({S})", cells(items, "acc")),
                CardEntry("robustness", title, f"fluctuation SD ({S})", cells(items, "acc_sd"), "lower"),
                CardEntry("robustness", title, f"Consist ({S})", cells(items, "consist")),
                CardEntry("reliability", title, f"Ovconf ({S})", cells(items, "ovconf"), "closer to 0"),
                CardEntry("coverage", title, f"oracle coverage ({S})", cells(items, "coverage_oracle")),
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
