"""Knowledge over training: headline metrics against the checkpoint, for runs that differ only by it.

A run's checkpoint is read from lm-eval's ``revision=`` model argument (``step1000``, as Pythia and
OLMo publish their checkpoints) or from the model folder's name (``.../checkpoint-500``,
``model-step2000``); ``belief-report --x REGEX`` overrides both with a regular expression whose first
group, searched in the model arguments, is the x value. Runs whose model arguments are equal once the
checkpoint is taken out form one training run; one with two or more checkpoints gets a figure per task
and a table.

With a fact split (``belief_tasks.facts.split``: the facts a continued training saw, and the held-out
ones; ``belief-report --split``, ``belief-eval sweep``) each curve is drawn per side of the split, with an
interval over facts (``scoring.subsets``), and followed by paired differences on the same facts between
consecutive checkpoints and first against last, and by the probes' per-fact agreement at each step.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from belief_tasks.facts.split import HELD_OUT, TRAINED, FactSplit
from belief_tasks.families import FAMILIES
from belief_tasks.metrics.agreement import agreement_table, cohen_kappa
from belief_tasks.report.base import Context, Section, value
from belief_tasks.report.loading import ModelRun, home_relative
from belief_tasks.report.output import line_plot, slug
from belief_tasks.scoring.subsets import paired_subset_estimates, subset_estimates

TITLE = "Knowledge over training"
#: in a revision or a folder name: step1000, step-1000, checkpoint-500, ckpt_20, iter3000, global_step7
STEP = re.compile(r"(?:global_step|step|checkpoint|ckpt|iter)[-_]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class Checkpoint:
    series: str  # the model arguments without the checkpoint: runs of one training run share it
    step: float


def model_args(run) -> dict[str, str]:
    raw = run.info.get("model_args") or (run.info.get("config") or {}).get("model_args") or {}
    if isinstance(raw, dict):
        return {str(k): str(v) for k, v in raw.items()}
    pairs = [p.split("=", 1) for p in str(raw).split(",") if "=" in p]
    return {k.strip(): v.strip() for k, v in pairs}


def checkpoint(run, x_pattern: str | None = None) -> Checkpoint | None:
    """Where ``run`` sits in its training run, or None when no checkpoint can be read."""
    args = model_args(run) or {"pretrained": run.model_name}
    text = ",".join(f"{k}={v}" for k, v in sorted(args.items()))
    if x_pattern:
        m = re.search(x_pattern, text)
        return (
            Checkpoint(text[: m.start(1)] + "{x}" + text[m.end(1) :], float(m.group(1))) if m and m.groups() else None
        )
    revision = args.get("revision", "")
    if (m := STEP.search(revision)) or revision.isdigit():
        step = float(m.group(1)) if m else float(revision)
        rest = {k: v for k, v in args.items() if k != "revision"}
        return Checkpoint(",".join(f"{k}={v}" for k, v in sorted(rest.items())), step)
    name = args.get("pretrained", run.model_name)
    matches = list(STEP.finditer(name))
    if not matches:
        return None
    m = matches[-1]
    series = {**args, "pretrained": name[: m.start(1)] + "{step}" + name[m.end(1) :]}
    return Checkpoint(",".join(f"{k}={v}" for k, v in sorted(series.items())), float(m.group(1)))


def training_runs(ctx: Context, x_pattern: str | None = None) -> dict[str, list[tuple[float, ModelRun]]]:
    """series -> [(step, run)] sorted by step, for series with two or more distinct steps."""
    series: dict[str, list] = {}
    for run in ctx.runs:
        cp = checkpoint(run, x_pattern)
        if cp is not None:
            series.setdefault(cp.series, []).append((cp.step, run))
    return {s: sorted(rs, key=lambda x: x[0]) for s, rs in series.items() if len({st for st, _ in rs}) > 1}


def curve_table(ctx: Context, points: list[tuple[float, ModelRun]]) -> pd.DataFrame:
    """One row per (checkpoint, task): the task's headline metric, recomputed."""
    rows = []
    for step, run in points:
        for name, task in sorted(run.tasks.items()):
            family = FAMILIES.get(task.family)
            if family is None:
                continue
            metric = family.headline
            number = ctx.numbers(run, name).get(metric)
            low, high = number.interval if number is not None and number.interval else (float("nan"),) * 2
            rows.append(
                {
                    "step": step,
                    "model": run.name,
                    "task": name,
                    "metric": metric,
                    "value": value(ctx.numbers(run, name), metric),
                    "low": low,
                    "high": high,
                }
            )
    return pd.DataFrame(rows)


SIDES = (TRAINED, HELD_OUT)


def _on(split: FactSplit, side: str):
    return lambda r: split.of_record(r) == side


def split_table(points: list[tuple[float, ModelRun]], split: FactSplit) -> pd.DataFrame:
    """One row per (checkpoint, task, side): the headline metric on that side's facts, its interval over facts."""
    rows = []
    for step, run in points:
        for name, task in sorted(run.tasks.items()):
            family = FAMILIES.get(task.family)
            if family is None or family.budgeted is None or not task.has_records:
                continue
            for side in SIDES:
                found = subset_estimates(family.budgeted, task.records(), _on(split, side)).get(family.headline)
                if found is not None:
                    n = len({r["fact_id"] for r in task.records() if split.of_record(r) == side})
                    rows.append(
                        {
                            "step": step,
                            "task": name,
                            "metric": family.headline,
                            "facts": side,
                            "n facts": n,
                            "value": found.estimate,
                            "low": found.low,
                            "high": found.high,
                        }
                    )
    return pd.DataFrame(rows)


def split_differences(points: list[tuple[float, ModelRun]], split: FactSplit) -> pd.DataFrame:
    """Paired differences of the headline metric per side: each checkpoint minus the one before, and the last
    minus the first, on the same facts."""
    pairs = list(zip(points[:-1], points[1:]))
    if len(points) > 2:
        pairs.append((points[0], points[-1]))
    rows = []
    for (step_a, run_a), (step_b, run_b) in pairs:
        for name in sorted(set(run_a.tasks) & set(run_b.tasks)):
            ta, tb = run_a.tasks[name], run_b.tasks[name]
            family = FAMILIES.get(ta.family)
            if family is None or family.budgeted is None or not (ta.has_records and tb.has_records):
                continue
            for side in SIDES:
                found = paired_subset_estimates(family.budgeted, tb.records(), ta.records(), _on(split, side))
                iv = found.get(family.headline)
                if iv is not None:
                    rows.append(
                        {
                            "task": name,
                            "metric": family.headline,
                            "facts": side,
                            "from": step_a,
                            "to": step_b,
                            "difference": iv.estimate,
                            "low": iv.low,
                            "high": iv.high,
                            "beyond its interval": bool(iv.low > 0 or iv.high < 0),
                        }
                    )
    return pd.DataFrame(rows)


def split_agreement(points: list[tuple[float, ModelRun]], split: FactSplit) -> pd.DataFrame:
    """Per checkpoint and side, for each two probes of the run: Cohen's κ and the share of facts on which
    their known-fact rules agree (facts joined by id: the probes of one run read one dataset)."""
    from belief_tasks.report.agreement import probes_of

    rows = []
    for step, run in points:
        probes = probes_of(run)
        for i, a in enumerate(probes):
            for b in probes[i + 1 :]:
                if a.dataset != b.dataset:
                    continue
                for side in SIDES:
                    facts = sorted(f for f in set(a.known) & set(b.known) if split.side(a.key_text(f)) == side)
                    if not facts:
                        continue
                    x, y = [a.known[f] for f in facts], [b.known[f] for f in facts]
                    table = agreement_table(x, y)
                    rows.append(
                        {
                            "step": step,
                            "probes": f"{a.task} / {b.task}",
                            "facts": side,
                            "n facts": len(facts),
                            "kappa": cohen_kappa(x, y),
                            "agreement": table["agreement"],
                            "both known": table["both"],
                        }
                    )
    return pd.DataFrame(rows)


def split_markdown(ctx: Context, i: int, series: str, points, split: FactSplit) -> list[str]:
    w = ctx.writer
    md: list[str] = []
    table = split_table(points, split)
    if table.empty:
        return md
    name = f"training_{i}_split"
    md.append(
        f"#### Trained and held-out facts (split seed {split.seed}, {len(split.trained)} trained and "
        f"{len(split.held_out)} held-out facts in the split)\n"
    )
    md.append(
        "The headline metric on each side of the split, with a 95 % interval over facts (the stratified "
        "bootstrap, facts of each side taken as a sample of facts like them; `scoring.subsets`).\n"
    )
    md.append(w.table(table, name, "Headline metric per checkpoint and side of the split.", digits=4))
    groups = list(table.groupby(["task", "facts"], sort=True))
    lines = [
        (f"{task}, {side} ({grp['metric'].iloc[0]})", list(grp["step"]), list(grp["value"]))
        for (task, side), grp in groups
    ]
    bands = [(list(grp["low"]), list(grp["high"])) for _, grp in groups]
    fig = line_plot(
        lines,
        "Trained vs held-out facts",
        "training step",
        "headline metric",
        "task, facts",
        xlim=None,
        ylim=None,
        bands=bands,
    )
    md.append(w.figure(fig, name, "headline metric on the trained and the held-out facts, 95 % bands"))
    diffs = split_differences(points, split)
    if not diffs.empty:
        md.append(
            "Paired differences on the same facts (later minus earlier checkpoint; the last row per task "
            "and side: last minus first), with their paired 95 % intervals.\n"
        )
        md.append(w.table(diffs, f"{name}_differences", "Paired differences between checkpoints per side.", digits=4))
    agree = split_agreement(points, split)
    if not agree.empty:
        md.append(
            "Do the probes agree more as the facts are learnt? Per checkpoint and side: Cohen's κ and the "
            "share of facts on which two probes' known-fact rules agree.\n"
        )
        md.append(w.table(agree, f"{name}_agreement", "Agreement between probes per checkpoint and side.", digits=4))
    return md


def build(ctx: Context, x_pattern: str | None = None, split: FactSplit | None = None) -> Section | None:
    found = training_runs(ctx, x_pattern)
    if not found:
        return None
    w = ctx.writer
    md = [
        f"## {TITLE}\n",
        "Each headline metric against the training step, for runs whose model arguments differ only "
        "by the checkpoint (`revision=stepN`, a step in the model folder's name, or `belief-report --x`). Budgeted "
        "runs are drawn with their 95 % intervals as bands (columns `low`, `high`).\n",
    ]
    drawn = 0
    for i, (series, points) in enumerate(found.items()):
        table = curve_table(ctx, points)
        if table.empty:
            continue
        drawn += 1
        shown = home_relative(series)  # reports are shared beyond the machine: no home folder in them
        md.append(f"### `{shown}`\n")
        md.append(w.table(table, f"training_{i}_{slug(shown)[:40]}", "Headline metric per checkpoint.", digits=4))
        groups = list(table.groupby("task", sort=True))
        lines = [(f"{task} ({grp['metric'].iloc[0]})", list(grp["step"]), list(grp["value"])) for task, grp in groups]
        # budgeted runs: their 95 % intervals as bands
        bands = [(list(grp["low"]), list(grp["high"])) if grp["low"].notna().any() else None for _, grp in groups]
        fig = line_plot(
            lines,
            "Knowledge over training",
            "training step",
            "headline metric",
            "task",
            xlim=None,
            ylim=None,
            bands=bands,
        )
        md.append(w.figure(fig, f"training_{i}_{slug(shown)[:40]}", "headline metrics against the training step"))
        if split is not None:
            md += split_markdown(ctx, i, series, points, split)
    if not drawn:
        return None
    return Section(TITLE, "\n".join(md), summary=[f"{drawn} training run(s) with several checkpoints"])
