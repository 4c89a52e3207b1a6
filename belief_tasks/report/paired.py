"""Paired differences: two runs of one task on the same facts, each metric's difference with its paired
95 % interval ("A − B: +0.031 [+0.012, +0.050]").

Runs are models, checkpoints or settings that evaluated the same facts: two budgeted runs with the same
draw (budget, seed, data), or two full runs. A fact's values in both runs form one unit of the
stratified bootstrap (``belief_tasks.scoring.budgeted.paired_estimates``), so what the runs share
cancels and the interval is much narrower than the two runs' own intervals side by side. For two full
runs there is no sampling of facts: the difference is exact for those facts and printed as such.
"""

from __future__ import annotations

import itertools
import math

import pandas as pd

from belief_tasks.families import budget_estimators
from belief_tasks.report.base import Context, Section, value
from belief_tasks.scoring.budgeted import BudgetError, is_budgeted, paired_estimates
from belief_tasks.scoring.common import records_behind

TITLE = "Paired differences"


def signed(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:+.4f}"


def difference_text(iv, budgeted: bool) -> str:
    """'+0.0310 [+0.0120, +0.0500]' (budgeted runs), '+0.0310 (exact: every fact)' (full runs)."""
    if not budgeted:
        return f"{signed(iv.estimate)} (exact: every fact)"
    return f"{signed(iv.estimate)} [{signed(iv.low)}, {signed(iv.high)}]"


def _pairs(ctx: Context):
    """(task name, family, [(run, task)]) for every task of ours logged by two or more runs."""
    by_task: dict[str, list] = {}
    for run, task in ctx.tasks(r".*"):
        if task.has_records and budget_estimators(task.family) is not None:
            by_task.setdefault(task.name, []).append((run, task))
    return [(name, found[0][1].family, found) for name, found in sorted(by_task.items()) if len(found) > 1]


def _rows(ctx: Context, family: str, a, b, notes: list[str]) -> list[dict]:
    (run_a, task_a), (run_b, task_b) = a, b
    est = budget_estimators(family)
    if est is None:  # found only for families with estimators
        return []
    try:
        diffs = paired_estimates(est, task_a.records(), task_b.records())
    except (BudgetError, ValueError) as e:
        notes.append(f"`{task_a.name}`: {run_a.name} and {run_b.name} are not paired ({e}).")
        return []
    budgeted = is_budgeted(records_behind(task_a.records()))
    na, nb = ctx.numbers(run_a, task_a.name), ctx.numbers(run_b, task_b.name)
    return [
        {
            "task": task_a.name,
            "metric": m,
            "A": run_a.name,
            "B": run_b.name,
            "value A": value(na, m),
            "value B": value(nb, m),
            "A − B": difference_text(iv, budgeted),
            "difference": iv.estimate,
            "low": iv.low if budgeted else iv.estimate,
            "high": iv.high if budgeted else iv.estimate,
            "budgeted": budgeted,
        }
        for m, iv in diffs.items()
        if not (pd.isna(value(na, m)) and pd.isna(value(nb, m)))
    ]


def build(ctx: Context) -> Section | None:
    found = _pairs(ctx)
    if not found:
        return None
    rows: list[dict] = []
    notes: list[str] = []
    for _name, family, runs in found:
        for a, b in itertools.combinations(runs, 2):
            rows += _rows(ctx, family, a, b, notes)
    if not rows and not notes:
        return None
    df = pd.DataFrame(rows)
    md = [
        f"## {TITLE}\n",
        "Each metric of one run minus another's on the same facts. Budgeted runs: the difference of the two "
        "estimates of the full-data values with its paired 95 % interval (a fact's values in both runs form one "
        "unit of the stratified bootstrap); an interval that excludes 0 says the runs differ on the full data. "
        "Full runs: the exact difference on their facts.\n",
        *[f"*{n}*\n" for n in notes],
    ]
    summary = []
    if rows:
        shown = df[["task", "A", "B", "metric", "value A", "value B", "A − B"]]
        md.append(ctx.writer.table(shown, "paired_differences", "A − B per metric.", csv=df.drop(columns=["A − B"])))
        headline = df.groupby(["task", "A", "B"], sort=False).head(1)
        summary = [f"{r['task']} {r['metric']}: {r['A']} − {r['B']}: {r['A − B']}" for _, r in headline.iterrows()]
    return Section(TITLE, "\n".join(md), summary=summary)
