"""``belief-report``: the papers' tables and figures from lm-eval output folders.

``build_report(paths, out)`` reads every results JSON below ``paths`` (with the
``--log_samples`` files beside it), recomputes each number from the per-doc
records with the tasks' own aggregations and ``belief_tasks.metrics``, and writes
``out/report.md``, ``out/tables/*.csv``, ``out/figures/*.png`` and
``out/cards/<model>.md``. Sections appear for the families whose tasks are present (``family_sections``:
one per family of ``belief_tasks.families``):

* ``belief_icl``  BELIEF-ICL (v3 Table 17, calibration, coverage, knowledge sharing)
* ``belief_mlm``  BELIEF for masked LMs
* ``bear``        BEAR (Table 3, per template, relation, domain)
* ``iclke``       IC-LKE / EIC-LKE (Table 7, Figure 5, η, Accuracy@K)
* ``monitor``     MONITOR (Tables 4, 11, 12)
* ``agreement``   where the probes agree on which facts a model knows (Cohen's κ, per fact)
* ``training``    headline metrics against the training step, for runs that differ only by checkpoint
* ``paired``      differences between runs on the same facts, with paired 95 % intervals
* ``card``        one knowledge card per model across families
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["build_report", "Report"]


@dataclass
class Report:
    path: Path  # report.md
    runs: list
    sections: list
    summary: list[str]  # the terminal summary
    checked: int  # numbers compared with the harness's results JSON
    mismatched: list[str]  # task/metric whose recomputed value differs


def family_sections() -> dict:
    """family name (``belief_tasks.families``) -> its section module (``build(ctx)``; ``PROBES``: the probe
    patterns of the tasks it shows)."""
    from belief_tasks.report import bear, belief_icl, belief_mlm, iclke, monitor

    return {"belief_icl": belief_icl, "belief_mlm": belief_mlm, "bear": bear, "iclke": iclke, "monitor": monitor}


def build_report(
    paths, out, title: str = "Knowledge report", x_pattern: str | None = None, split=None, pool: bool = True
) -> Report:
    """``split``: a ``facts.split.FactSplit`` (trained / held-out facts), for the training curves per side.
    ``pool``: pool the shards of a run split by relation into one run (``report.shards``)."""
    import pandas as pd

    from belief_tasks.report import agreement, paired, shards, training, truncation, unclaimed_tasks
    from belief_tasks.report.base import Context
    from belief_tasks.report.card import render
    from belief_tasks.report.loading import home_relative, limit_note, load_runs
    from belief_tasks.report.output import ReportWriter, markdown_table
    from belief_tasks.report.recompute import mismatches

    runs = shards.pool(load_runs(paths)) if pool else load_runs(paths)
    writer = ReportWriter(out)
    ctx = Context(runs, writer)
    families = family_sections()
    sections = [s for s in (mod.build(ctx) for mod in (*families.values(), agreement, paired)) if s is not None]
    curves = training.build(ctx, x_pattern, split)
    if curves is not None:
        sections.append(curves)
    claimed: dict[str, set[str]] = {r.name: set() for r in runs}
    for mod in families.values():
        for pat in mod.PROBES:
            for run, task in ctx.tasks(pat):
                claimed[run.name].add(task.name)
    rest = unclaimed_tasks.build(ctx, claimed)
    if rest is not None:
        sections.append(rest)

    # verification: every recomputed number against the harness's own
    numbers = ctx.all_numbers()
    checked = sum(1 for ns in numbers.values() for n in ns.values() if n.harness is not None and n.value is not None)
    mismatched = mismatches(numbers)
    for s in sections:
        checked += len(s.checks)
        mismatched += [what for what, ok in s.checks if not ok]
    pooled = shards.checks(runs)  # a pooled run's shards, each against its own results JSON
    checked += len(pooled)
    mismatched += [what for what, ok in pooled if not ok]

    md = [
        f"# {title}\n",
        f"Made by `belief-report` from {len(runs)} model run{'s' if len(runs) != 1 else ''}. "
        "Every number is recomputed "
        "from the per-sample records (`--log_samples`) with the tasks' own aggregation functions and "
        "`belief_tasks.metrics`.\n",
    ]
    if checked:
        md.append(
            f"**Check:** {checked - len(mismatched)} of {checked} recomputed numbers equal the harness's results JSON"
            + ("." if not mismatched else f"; differing: {', '.join(mismatched[:20])}.")
            + "\n"
        )
    runs_df = pd.DataFrame(
        [
            {
                "Model": r.name,
                "lm-eval model name": home_relative(r.model_name),
                "Backend": r.backend,
                "Limit": "–" if r.limit is None else f"{r.limit:g}",
                "Tasks": len(r.tasks),
                "Per-sample files": sum(t.has_records for t in r.tasks.values()),
                "Run": r.date,
                "Folder": "/".join(r.folder.parts[-2:]),
            }
            for r in runs
        ]
    )
    md.append("## Runs\n")
    md.append(markdown_table(runs_df) + "\n")
    md += [f"- **{r.name}**: {note}.\n" for r in runs for note in (limit_note(r), shards.note(r)) if note]
    md.append(truncation.markdown(runs))
    md.append("## Contents\n")
    md.append(
        "\n".join(["- [Knowledge cards](#knowledge-cards)"] + [f"- [{s.title}](#{_anchor(s.title)})" for s in sections])
        + "\n"
    )
    md.append("## Knowledge cards\n")
    for run in runs:
        entries = [e for s in sections for e in s.card.get(run.name, [])]
        md.append(render(run, entries, writer, heading="###", column={m.FAMILY: name for name, m in families.items()}))
    for s in sections:
        md.append(s.markdown)
    path = writer.write("report.md", "\n".join(md))

    summary = [f"belief-report: {len(runs)} model run(s), {len(sections)} section(s) -> {path}"]
    summary += [f"{r.name}: {note}" for r in runs for note in (limit_note(r), shards.note(r)) if note]
    if checked:
        summary.append(
            f"check: {checked - len(mismatched)}/{checked} recomputed numbers equal the results JSON"
            + ("" if not mismatched else f" (differing: {', '.join(mismatched[:10])})")
        )
    summary += [f"truncated: {line}" for line in truncation.notes(runs)]
    for s in sections:
        if s.summary:
            summary.append(f"[{s.title}]")
            summary += ["  " + line for line in s.summary]
    return Report(path, runs, sections, summary, checked, mismatched)


def _anchor(title: str) -> str:
    import re

    return re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")
