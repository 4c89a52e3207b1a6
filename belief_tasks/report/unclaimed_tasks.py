"""Tasks no family section claims (new ``belief_*`` tasks, or lm-eval's own): their numbers as a table."""

from __future__ import annotations

import pandas as pd

from belief_tasks.report.base import Context, Section
from belief_tasks.report.output import pm

FAMILY = "Other tasks"


def build(ctx: Context, claimed: dict[str, set]) -> Section | None:
    rows = []
    for run in ctx.runs:
        for name in sorted(run.tasks):
            if name in claimed.get(run.name, set()):
                continue
            for metric, n in ctx.numbers(run, name).items():
                rows.append(
                    {
                        "Model": run.name,
                        "Task": name,
                        "Metric": metric,
                        "Value": pm(n.value, n.stderr),
                        "value": n.value,
                        "stderr": n.stderr,
                    }
                )
    if not rows:
        return None
    df = pd.DataFrame(rows)
    md = [
        f"## {FAMILY}\n",
        "Tasks outside the four families, with the numbers their own aggregations give.\n",
        ctx.writer.table(df.drop(columns=["value", "stderr"]), "other_tasks", csv=df.drop(columns=["Value"])),
    ]
    return Section(FAMILY, "\n".join(md))
