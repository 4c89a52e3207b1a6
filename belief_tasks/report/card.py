"""The knowledge card: one page per model, its numbers from every method family side by side.

Rows are the four things a reader asks of a model's factual knowledge: accuracy,
robustness (fluctuation, consistency, PFD/IRD), reliability (Ovconf, MONITOR) and
coverage; columns are the method families present. No paper has this view: the
families measure on different data and scales, so the card juxtaposes, it does not
combine.
"""

from __future__ import annotations

import pandas as pd

from belief_tasks.report.base import DIMENSIONS, CardEntry
from belief_tasks.report.loading import ModelRun
from belief_tasks.report.output import ReportWriter, markdown_table, slug

ARROW = {"higher": "↑", "lower": "↓", "closer to 0": "→0"}


def card_matrix(entries: list[CardEntry]) -> pd.DataFrame:
    families = list(dict.fromkeys(e.family for e in entries))
    rows = []
    for dim in DIMENSIONS:
        row = {"": dim}
        for fam in families:
            cell = [f"{e.measure} {ARROW.get(e.better, '')}: {e.text}" for e in entries if e.dimension == dim and e.family == fam]
            row[fam] = "<br>".join(cell) if cell else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def budget_lines(run: ModelRun) -> list[str]:
    """For a budgeted run: which tasks were estimated from how many facts."""
    out = []
    for name, task in sorted(run.tasks.items()):
        d = task.budget_design
        if d:
            out.append(f"`{name}`: estimated from {d['facts_drawn']:,} of {d['facts_in_population']:,} facts "
                       f"(budget {d['budget']:g}, seed {d['seed']}); values are estimates of the full run with 95 % "
                       "intervals.")
    return [("Budgeted run. " if out else "") + " ".join(out) + "\n"] if out else []


def render(run: ModelRun, entries: list[CardEntry], writer: ReportWriter, heading: str = "##") -> str:
    """The card's Markdown; also writes ``cards/<model>.md`` and ``tables/card_<model>.csv``."""
    info = run.info
    lines = [f"{heading} Knowledge card: {run.name}\n"]
    meta = [f"model `{run.model_name}`"]
    if info.get("model_args"):
        meta.append(f"args `{info['model_args']}`")
    meta.append(f"{len(run.tasks)} tasks")
    if run.date:
        meta.append(f"run {run.date}")
    lines.append(" · ".join(m for m in meta if m) + "\n")
    lines += budget_lines(run)
    if entries:
        lines.append(markdown_table(card_matrix(entries)))
        lines.append("\n↑ higher is better, ↓ lower is better, →0 closer to zero is better. "
                     "Families differ in data and scale: compare within a row's family, not across.\n")
        long = pd.DataFrame([{"model": run.name, "dimension": e.dimension, "family": e.family, "measure": e.measure,
                              "value": e.text, "better": e.better} for e in entries])
        long.to_csv(writer.out / "tables" / f"card_{slug(run.name)}.csv", index=False)
    else:
        lines.append("*No task of a known family in this run.*\n")
    text = "\n".join(lines)
    writer.write(f"cards/{slug(run.name)}.md", text.replace(heading + " ", "# ", 1)
                 .replace("](figures/", "](../figures/").replace("](tables/", "](../tables/"))
    return text
