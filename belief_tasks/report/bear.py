"""BEAR section (Wiland et al., 2024): Table 3 (BEAR, BEAR 1:1, BEAR 1:N with ±), per-template
scores, a per-relation bar chart, a per-domain table, and a calibration view: lm-pub-quiz 0.3.3's
confidence metrics (confidence, margin, uncertainty, Brier) per model and per relation, its
per-relation average softmax vectors, and a reliability curve of the top option's probability.

Tasks ``belief_bear`` / ``belief_bear_big`` (and any ``belief_bear*`` variant with the same
records, ``belief_tasks.scoring.bear.BearRecord``). Breakdowns call ``belief_tasks.metrics.bear`` on
the arrays ``belief_tasks.scoring.bear`` reads out of the records.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.families import Family
from belief_tasks.metrics import bear as bear_metrics
from belief_tasks.metrics.belief import DEFAULT_BINS, calibration_bins, fluctuation
from belief_tasks.report.base import CardEntry, Context, MetricTable, Section, stderr, value
from belief_tasks.report.belief_icl import plot_bins
from belief_tasks.report.loading import limit_note
from belief_tasks.report.output import fmt, grouped_bars, line_plot, pm
from belief_tasks.scoring.bear import (
    CONFIDENCE_METRICS,
    confidence_by_relation,
    ranks_of,
    scores_by_relation,
    templates_of,
)

TASK_RE = r"belief_bear\w*"
PROBES = (TASK_RE,)
#: Table 3's columns: (metric, header)
TABLE3 = (
    ("bear", "BEAR ↑"),
    ("bear_1to1", "BEAR 1:1 ↑"),
    ("bear_1toN", "BEAR 1:N ↑"),
    ("p_at_5", "P@5 ↑"),
    ("p_at_10", "P@10 ↑"),
)


def _label(run, task, many_tasks: bool) -> str:
    return f"{run.name} · {task.name}" if many_tasks else run.name


def stderr_note(found) -> str:
    """What the ± of the BEAR scores is in these runs (Table 3's spread across templates, a budgeted run's
    bootstrap standard error, or none with one template), and a --limit that cuts them."""
    budgeted = sorted(t.name for _, t in found if t.budget_design)
    one_template = sorted(
        t.name for _, t in found if t.has_records and not t.budget_design and len(set(templates_of(t.records()))) == 1
    )
    notes = []
    if len(budgeted) + len(one_template) < len(found):
        notes.append(
            "± is the standard error across templates (Table 3)"
            + (" in the other tasks" if budgeted or one_template else "")
        )
    if budgeted:
        notes.append(
            f"{', '.join(budgeted)}: a budgeted run; values estimate the full run and ± is the bootstrap standard "
            "error over the drawn facts (the 95 % interval: `<metric>_ci95` in the results JSON)"
        )
    if one_template:
        notes.append(f"{', '.join(one_template)}: one template, so no spread across templates and no ±")
    limited = sorted({limit_note(r) for r, _ in found if limit_note(r)})
    return "; ".join(notes) + "." + "".join(f" **{n}.**" for n in limited)


def build(ctx: Context, family: Family) -> Section | None:
    found = [(r, t) for r, t in ctx.tasks(TASK_RE) if t.has_records or t.value("bear") is not None]
    if not found:
        return None
    many_tasks = len({t.name for _, t in found}) > 1
    md = [
        f"## {family.title}\n",
        "Ranking-based probe (Wiland et al., 2024): each fact's statement is scored with every answer option "
        "(summed log-likelihood); P@1 = the true object ranks first. The BEAR score is P@1 per template, "
        f"averaged over templates. {stderr_note(found)}\n",
    ]
    md.append(_table3(ctx, found))
    with_records = [(r, t) for r, t in found if t.has_records]
    if not with_records:
        md.append(
            "*Per-template, per-relation and per-domain breakdowns need the per-sample files (`--log_samples`).*\n"
        )
    else:
        md += _templates(ctx, with_records) + _relations_and_domains(ctx, with_records, many_tasks)
        _confidence(ctx, found, md)
        _calibration(ctx, with_records, many_tasks, md)
    return Section(family.title, "\n".join(md), _summary(ctx, found), _card(ctx, found, family.title))


def _table3(ctx: Context, found) -> str:
    """Table 3: the BEAR scores (± where the metric has a standard error on the run) and the instances."""
    table = MetricTable(TABLE3)
    for run, task in found:
        shown, raw = table.add({"Model": run.name, "Task": task.name}, ctx.numbers(run, task.name))
        recs = task.records()
        shown["Instances"] = raw["instances"] = len({r["fact_id"] for r in recs}) if recs else None
    return "### BEAR scores (cf. Table 3)\n\n" + table.write(ctx.writer, "bear_table3")


def _templates(ctx: Context, with_records) -> list[str]:
    """P@1 of each template index over all relations, ± its standard error over instances."""
    rows = []
    for run, task in with_records:
        ranks, templates = ranks_of(task.records()), templates_of(task.records())
        for t, scores in bear_metrics.template_scores(ranks, templates).items():
            correct = [int(rank == 0) for rank, ti in zip(ranks, templates) if ti == t]
            stderr = bear_metrics.mean_stderr(correct)
            rows.append(
                {
                    "Model": run.name,
                    "Task": task.name,
                    "Template": t,
                    "P@1": scores,
                    "stderr": stderr,
                    "n": len(correct),
                }
            )
    per_t = pd.DataFrame(rows)
    shown = per_t.assign(**{"P@1": [pm(a, b) for a, b in zip(per_t["P@1"], per_t["stderr"])]}).drop(columns="stderr")
    return [
        "### Per-template scores\n",
        "P@1 of each template index over all relations (± standard error over instances). The spread across "
        "templates is BEAR's sensitivity to the wording.\n",
        ctx.writer.table(shown, "bear_templates", csv=per_t),
    ]


def _relations_and_domains(ctx: Context, with_records, many_tasks: bool) -> list[str]:
    """P@1 per relation (a bar chart and its table) and per domain, all templates pooled."""
    w = ctx.writer

    def accuracy_by(field: str, index: str) -> pd.DataFrame:
        df = pd.DataFrame(
            {
                _label(run, task, many_tasks): bear_metrics.accuracy_by(
                    ranks_of(task.records()), [r[field] for r in task.records()]
                )
                for run, task in with_records
            }
        )
        df.index.name = index
        return df

    rel_df, dom_df = accuracy_by("relation", "relation"), accuracy_by("domains", "domain")
    fig = grouped_bars(rel_df, None, "BEAR accuracy per relation (all templates pooled)", "relation", "P@1", "model")
    return [
        "### Per relation\n",
        w.figure(fig, "bear_relations", "BEAR accuracy per relation"),
        w.table(rel_df.reset_index(), "bear_relations", "P@1 per relation, all templates pooled."),
        "### Per domain\n",
        w.table(dom_df.reset_index(), "bear_domains", "P@1 per domain (a relation may belong to several)."),
    ]


def _confidence(ctx: Context, found, md: list[str]) -> None:
    """lm-pub-quiz 0.3.3's confidence metrics per model: all / correct / incorrect instances, and Brier."""
    table = MetricTable([(m, m) for m in CONFIDENCE_METRICS])
    for run, task in found:
        table.add(
            {"Model": run.name, "Task": task.name}, ctx.numbers(run, task.name), {"model": run.name, "task": task.name}
        )
    if all(pd.isna(x["confidence"]) for x in table.raw):
        return
    md.append("### Confidence and calibration (lm-pub-quiz's confidence metrics)\n")
    md.append(
        "Over the softmax of each instance's option scores (its answer space): confidence = the top option's "
        "probability, margin = its gap to the runner-up, uncertainty = entropy / log2 of the relation's distinct "
        "answers, Brier = mean squared gap to the one-hot answer, averaged over options. Each relation alone, then "
        "weighted by its instances (lm-pub-quiz 0.3.3); `_correct` / `_incorrect`: over the instances the top "
        "option gets right / wrong. A calibrated model is confident when right and unsure when wrong.\n"
    )
    md.append(table.write(ctx.writer, "bear_confidence"))


def _calibration(ctx: Context, with_records, many_tasks: bool, md: list[str]) -> None:
    """Per-relation confidence metrics, average softmax vectors, and the reliability curve (top-option
    probability vs accuracy, bins of equal size by descending confidence)."""
    w = ctx.writer
    per_rel: list[dict] = []
    softmax_rows: list[dict] = []
    bins_rows: list[dict] = []
    series: list[tuple] = []
    for run, task in with_records:
        label = _label(run, task, many_tasks)
        _relation_confidence_rows(label, task, per_rel, softmax_rows)
        conf, correct = [], []
        for scores, golds in scores_by_relation(task.records()).values():
            terms = bear_metrics.instance_confidences(scores, golds)
            conf += terms["confidence"].tolist()
            correct += terms["correct"].tolist()
        bins = calibration_bins(conf, correct, plot_bins(DEFAULT_BINS, len(conf)))
        series.append((label, [b["confidence"] for b in bins], [b["accuracy"] for b in bins]))
        bins_rows += [{"model": label, "bin": i, **b} for i, b in enumerate(bins, 1)]
    if not series:
        return
    fig = line_plot(
        series,
        "BEAR calibration (top option's softmax probability)",
        "confidence",
        "P@1 of the bin",
        "model",
        diagonal=True,
    )
    md.append(w.figure(fig, "bear_calibration", "BEAR calibration"))
    md.append(
        w.table(
            pd.DataFrame(bins_rows), "bear_calibration_bins", "Reliability bins (equal size, by descending confidence)."
        )
    )
    md.append(
        w.table(pd.DataFrame(per_rel), "bear_confidence_relations", "lm-pub-quiz's confidence metrics per relation.")
    )
    w.table(pd.DataFrame(softmax_rows), "bear_avg_softmax")  # CSV only: one row per (relation, option)
    md.append(
        "*Average softmax per answer option (lm-pub-quiz's `avg_softmax`, all / correct / incorrect): "
        "[tables/bear_avg_softmax.csv](tables/bear_avg_softmax.csv)*\n"
    )


def _relation_confidence_rows(label: str, task, per_rel: list[dict], softmax_rows: list[dict]) -> None:
    """Append the task's confidence metrics per relation to ``per_rel`` and its average softmax per relation and
    option to ``softmax_rows``."""
    for rel, v in confidence_by_relation(task.records()).items():
        per_rel.append(
            {
                "model": label,
                "relation": rel,
                "support": v["support"],
                "brier": v["brier_score"],
                **{
                    f"{k}_{sub}": v[metric][sub]
                    for k, metric in (
                        ("confidence", "confidence_score"),
                        ("margin", "margin_of_confidence"),
                        ("uncertainty", "uncertainty_score"),
                    )
                    for sub in bear_metrics.CONFIDENCE_SUBSETS
                },
            }
        )
        for i, p in enumerate(v["avg_softmax"]["all"]):
            softmax_rows.append(
                {
                    "model": label,
                    "relation": rel,
                    "option": i,
                    "all": p,
                    **{
                        sub: None if v["avg_softmax"][sub] is None else v["avg_softmax"][sub][i]
                        for sub in ("correct", "incorrect")
                    },
                }
            )


def _card(ctx: Context, found, title: str) -> dict[str, list[CardEntry]]:
    card: dict[str, list[CardEntry]] = {}
    for run, task in found:
        n = ctx.numbers(run, task.name)
        entries = card.setdefault(run.name, [])
        tag = "" if task.name == "belief_bear" else f" [{task.name}]"
        entries.append(CardEntry("accuracy", title, f"BEAR score{tag}", pm(value(n, "bear"), stderr(n, "bear"), 3)))
        if task.has_records:
            scores = list(bear_metrics.template_scores(ranks_of(task.records()), templates_of(task.records())).values())
            if len(scores) > 1:
                rng, sd = fluctuation(scores)
                entries.append(
                    CardEntry(
                        "robustness", title, f"template range / SD{tag}", f"{fmt(rng, 3)} / {fmt(sd, 3)}", "lower"
                    )
                )
        entries.append(CardEntry("coverage", title, f"P@10{tag}", fmt(value(n, "p_at_10"), 3)))
    return card


def _summary(ctx: Context, found) -> list[str]:
    out = []
    for run, task in found:
        n = ctx.numbers(run, task.name)
        out.append(
            f"{run.name:<28} {task.name:<22} BEAR {pm(value(n, 'bear'), stderr(n, 'bear'))}  "
            f"1:1 {fmt(value(n, 'bear_1to1'))}  1:N {fmt(value(n, 'bear_1toN'))}"
        )
    return out
