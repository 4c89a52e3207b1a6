"""Knowledge over training: headline metrics against the checkpoint, for runs that differ only by it.

A run's checkpoint is read from lm-eval's ``revision=`` model argument (``step1000``, as Pythia and
OLMo publish their checkpoints) or from the model folder's name (``.../checkpoint-500``,
``model-step2000``); ``belief-report --x REGEX`` overrides both with a regular expression whose first
group, searched in the model arguments, is the x value. Runs whose model arguments are equal once the
checkpoint is taken out form one training run; one with two or more checkpoints gets a figure per task
and a table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from belief_tasks.families import FAMILIES
from belief_tasks.report.base import Context, Section, value
from belief_tasks.report.output import line_plot, slug

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
        return Checkpoint(text[: m.start(1)] + "{x}" + text[m.end(1):], float(m.group(1))) if m and m.groups() else None
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
    series = {**args, "pretrained": name[: m.start(1)] + "{step}" + name[m.end(1):]}
    return Checkpoint(",".join(f"{k}={v}" for k, v in sorted(series.items())), float(m.group(1)))


def training_runs(ctx: Context, x_pattern: str | None = None) -> dict[str, list[tuple[float, object]]]:
    """series -> [(step, run)] sorted by step, for series with two or more distinct steps."""
    series: dict[str, list] = {}
    for run in ctx.runs:
        cp = checkpoint(run, x_pattern)
        if cp is not None:
            series.setdefault(cp.series, []).append((cp.step, run))
    return {s: sorted(rs, key=lambda x: x[0]) for s, rs in series.items() if len({st for st, _ in rs}) > 1}


def curve_table(ctx: Context, points: list[tuple[float, object]]) -> pd.DataFrame:
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
            rows.append({"step": step, "model": run.name, "task": name, "metric": metric,
                         "value": value(ctx.numbers(run, name), metric), "low": low, "high": high})
    return pd.DataFrame(rows)


def build(ctx: Context, x_pattern: str | None = None) -> Section | None:
    found = training_runs(ctx, x_pattern)
    if not found:
        return None
    w = ctx.writer
    md = [f"## {TITLE}\n", "Each headline metric against the training step, for runs whose model arguments differ only "
          "by the checkpoint (`revision=stepN`, a step in the model folder's name, or `belief-report --x`). Budgeted "
          "runs are drawn with their 95 % intervals as bands (columns `low`, `high`).\n"]
    drawn = 0
    for i, (series, points) in enumerate(found.items()):
        table = curve_table(ctx, points)
        if table.empty:
            continue
        drawn += 1
        md.append(f"### `{series}`\n")
        md.append(w.table(table, f"training_{i}_{slug(series)[:40]}", "Headline metric per checkpoint.", digits=4))
        groups = list(table.groupby("task", sort=True))
        lines = [(f"{task} ({grp['metric'].iloc[0]})", list(grp["step"]), list(grp["value"])) for task, grp in groups]
        # budgeted runs: their 95 % intervals as bands
        bands = [(list(grp["low"]), list(grp["high"])) if grp["low"].notna().any() else None for _, grp in groups]
        fig = line_plot(lines, "Knowledge over training", "training step", "headline metric", "task", xlim=None,
                        ylim=None, bands=bands)
        md.append(w.figure(fig, f"training_{i}_{slug(series)[:40]}", "headline metrics against the training step"))
    if not drawn:
        return None
    return Section(TITLE, "\n".join(md), summary=[f"{drawn} training run(s) with several checkpoints"])
