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
from belief_tasks.report.loading import ModelRun, home_relative, limit_note
from belief_tasks.report.output import ReportWriter, markdown_table, slug

ARROW = {"higher": "↑", "lower": "↓", "closer to 0": "→0"}
HOW_TO_READ = (
    "↑ higher is better, ↓ lower is better, →0 closer to zero is better; *facts*: how many facts each "
    "family's numbers come from (BELIEF: subject-relation pairs). Families differ in data and scale: "
    "compare within a row's family, not across. How to read each row: `python -m belief_tasks docs report` "
    "(docs/report.md of belief-tasks)."
)


def facts_row(run: ModelRun, families: list[str], column: dict[str, str]) -> dict[str, str]:
    """The card's *facts* row: per family column, the facts its tasks' records cover (``column``: a column's
    title -> the family name its tasks stamp)."""
    row = {"": "facts"}
    for fam in families:
        counts = {t.name: _facts_of(t) for t in run.tasks.values() if t.family and t.family == column.get(fam)}
        known = {n: c for n, c in counts.items() if c is not None}
        if not counts:
            row[fam] = "–"
        elif len(set(known.values())) == 1 and len(known) == len(counts):
            row[fam] = f"{next(iter(known.values()))}" + (f" per task ({len(counts)} tasks)" if len(counts) > 1 else "")
        else:
            row[fam] = "<br>".join(
                f"{n}: {c if c is not None else '? (no samples file)'}" for n, c in sorted(counts.items())
            )
    return row


def _facts_of(task):
    """A task's fact count; for a budgeted task "N of M (budget b)": its numbers estimate the M facts' run."""
    d = task.budget_design
    if d:
        return f"{d['facts_drawn']:,} of {d['facts_in_population']:,} (budget {d['budget']:g})"
    return task.fact_count()


def card_matrix(
    entries: list[CardEntry], run: ModelRun | None = None, column: dict[str, str] | None = None
) -> pd.DataFrame:
    families = list(dict.fromkeys(e.family for e in entries))
    rows = [facts_row(run, families, column)] if run is not None and column is not None else []
    for dim in DIMENSIONS:
        row = {"": dim}
        for fam in families:
            cell = [
                f"{e.measure} {ARROW.get(e.better, '')}: {e.text}"
                for e in entries
                if e.dimension == dim and e.family == fam
            ]
            row[fam] = "<br>".join(cell) if cell else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def budget_lines(run: ModelRun) -> list[str]:
    """For a budgeted run: which tasks were estimated from how many facts."""
    out = []
    for name, task in sorted(run.tasks.items()):
        d = task.budget_design
        if d:
            out.append(
                f"`{name}`: estimated from {d['facts_drawn']:,} of {d['facts_in_population']:,} facts "
                f"(budget {d['budget']:g}, seed {d['seed']})."
            )
    if out:
        out.append(
            "Values are estimates of the full run, ± their standard error (bootstrap over the drawn facts); "
            "each metric's 95 % interval is `<metric>_ci95` in the results JSON."
        )
    return [("Budgeted run. " if out else "") + " ".join(out) + "\n"] if out else []


def render(
    run: ModelRun,
    entries: list[CardEntry],
    writer: ReportWriter,
    heading: str = "##",
    column: dict[str, str] | None = None,
) -> str:
    """The card's Markdown; also writes ``cards/<model>.md`` and ``tables/card_<model>.csv``. ``column``
    (a family column's title -> its family name) adds the *facts* row."""
    info = run.info
    lines = [f"{heading} Knowledge card: {run.name}\n"]
    meta = [f"model `{home_relative(run.model_name)}`"]
    if info.get("model_args"):
        meta.append(f"args `{home_relative(str(info['model_args']))}`")
    if run.backend:
        meta.append(f"backend `{run.backend}`")
    meta.append(f"{len(run.tasks)} tasks")
    if run.shards:
        meta.append(f"pooled from {len(run.shards)} shards")
    if run.date:
        meta.append(f"run {run.date}")
    lines.append(" · ".join(m for m in meta if m) + "\n")
    if limit_note(run):
        lines.append(f"**{limit_note(run)}.**\n")
    lines += budget_lines(run)
    if entries:
        lines.append(markdown_table(card_matrix(entries, run, column)))
        lines.append("\n" + HOW_TO_READ + "\n")
        long = pd.DataFrame(
            [
                {
                    "model": run.name,
                    "dimension": e.dimension,
                    "family": e.family,
                    "measure": e.measure,
                    "value": e.text,
                    "better": e.better,
                }
                for e in entries
            ]
        )
        long.to_csv(writer.out / "tables" / f"card_{slug(run.name)}.csv", index=False)
    else:
        lines.append("*No task of a known family in this run.*\n")
    text = "\n".join(lines)
    writer.write(
        f"cards/{slug(run.name)}.md",
        text.replace(heading + " ", "# ", 1)
        .replace("](figures/", "](../figures/")
        .replace("](tables/", "](../tables/"),
    )
    return text
