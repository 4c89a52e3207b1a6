"""``belief-report``: the papers' tables and figures from lm-eval output folders.

``build_report(paths, out)`` reads every results JSON below ``paths`` (with the
``--log_samples`` files beside it), recomputes each number from the per-doc
records with the tasks' own aggregations and ``belief_tasks.metrics``, and writes
``out/report.md``, ``out/tables/*.csv``, ``out/figures/*.png`` and
``out/cards/<model>.md``. Sections appear for the families whose tasks are present, in the order of
``belief_tasks.families.FAMILIES`` and titled by each ``Family.title`` (``family_sections``: the module that draws
each family's section):

* ``belief_icl``  BELIEF-ICL (v3 Table 17, calibration, coverage, knowledge sharing)
* ``bear``        BEAR (Table 3, per template, relation, domain)
* ``iclke``       IC-LKE / EIC-LKE (Table 7, Figure 5, η, Accuracy@K)
* ``monitor``     MONITOR (Tables 4, 11, 12)
* ``belief_mlm``  BELIEF for masked LMs

then the sections across families:

* ``agreement``   where the probes agree on which facts a model knows (Cohen's κ, per fact)
* ``training``    headline metrics against the training step, for runs that differ only by checkpoint
* ``paired``      differences between runs on the same facts, with paired 95 % intervals
* ``card``        one knowledge card per model across families
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from belief_tasks.families import FAMILIES

if TYPE_CHECKING:
    from belief_tasks.report.base import Context, Section
    from belief_tasks.report.loading import ModelRun

__all__ = ["build_report", "Report"]


@dataclass
class Report:
    path: Path  # report.md
    runs: list
    sections: list
    summary: list[str]  # the terminal summary
    checked: int  # numbers compared with the harness's results JSON
    mismatched: list[str]  # task/metric whose recomputed value differs


def family_sections() -> dict[str, ModuleType]:
    """family name -> the module that draws its section (``build(ctx, family)``; ``PROBES``: the probe patterns of
    the tasks it shows), in the order of ``FAMILIES``. The report sits above ``families.py`` (it needs pandas, the
    tasks import the families without it), so the link from a family to its section is here, the only thing the
    report keeps of a family (``tests/test_metric_tables.py``: one section per family)."""
    from belief_tasks.report import bear, belief_icl, belief_mlm, iclke, monitor

    sections = {"belief_icl": belief_icl, "belief_mlm": belief_mlm, "bear": bear, "iclke": iclke, "monitor": monitor}
    return {name: sections[name] for name in FAMILIES if name in sections}


def build_report(
    paths, out, title: str = "Knowledge report", x_pattern: str | None = None, split=None, pool: bool = True
) -> Report:
    """``split``: a ``facts.split.FactSplit`` (trained / held-out facts), for the training curves per side.
    ``pool``: pool the shards of a run split by relation into one run (``report.shards``)."""
    from belief_tasks.report import shards
    from belief_tasks.report.base import Context
    from belief_tasks.report.loading import load_runs
    from belief_tasks.report.output import ReportWriter

    runs = shards.pool(load_runs(paths)) if pool else load_runs(paths)
    writer = ReportWriter(out)
    ctx = Context(runs, writer)
    sections = _sections(ctx, x_pattern, split)
    checked, mismatched = _checks(ctx, sections)
    path = writer.write("report.md", "\n".join(_markdown(ctx, sections, title, checked, mismatched)))
    summary = _summary(runs, sections, path, checked, mismatched)
    return Report(path, runs, sections, summary, checked, mismatched)


def _sections(ctx: Context, x_pattern: str | None, split) -> list[Section]:
    """The family sections (in ``FAMILIES`` order), the sections across families, and the tasks none claims."""
    from belief_tasks.report import agreement, paired, training, unclaimed_tasks

    families = family_sections()
    found = [mod.build(ctx, FAMILIES[name]) for name, mod in families.items()]
    found += [agreement.build(ctx), paired.build(ctx), training.build(ctx, x_pattern, split)]
    claimed: dict[str, set[str]] = {r.name: set() for r in ctx.runs}
    for mod in families.values():
        for pat in mod.PROBES:
            for run, task in ctx.tasks(pat):
                claimed[run.name].add(task.name)
    found.append(unclaimed_tasks.build(ctx, claimed))
    return [s for s in found if s is not None]


def _checks(ctx: Context, sections: list[Section]) -> tuple[int, list[str]]:
    """(numbers compared with the harness's results JSON, ``task/metric`` of those that differ): every recomputed
    number, each section's own checks, and each pooled run's shards against their own results JSON."""
    from belief_tasks.report import shards
    from belief_tasks.report.recompute import mismatches

    numbers = ctx.all_numbers()
    checked = sum(1 for ns in numbers.values() for n in ns.values() if n.harness is not None and n.value is not None)
    mismatched = mismatches(numbers)
    for what, ok in [c for s in sections for c in s.checks] + shards.checks(ctx.runs):
        checked += 1
        mismatched += [] if ok else [what]
    return checked, mismatched


def _check_line(checked: int, mismatched: list[str]) -> str:
    return f"{checked - len(mismatched)} of {checked} recomputed numbers equal the harness's results JSON" + (
        "." if not mismatched else f"; differing: {', '.join(mismatched[:20])}."
    )


def _markdown(ctx: Context, sections: list[Section], title: str, checked: int, mismatched: list[str]) -> list[str]:
    from belief_tasks.report import truncation
    from belief_tasks.report.card import render

    runs = ctx.runs
    md = [
        f"# {title}\n",
        f"Made by `belief-report` from {len(runs)} model run{'s' if len(runs) != 1 else ''}. "
        "Every number is recomputed "
        "from the per-sample records (`--log_samples`) with the tasks' own aggregation functions and "
        "`belief_tasks.metrics`.\n",
    ]
    md += [f"**Check:** {_check_line(checked, mismatched)}\n"] if checked else []
    md += ["## Runs\n", _runs_table(runs) + "\n"] + [f"- **{r.name}**: {note}.\n" for r, note in _run_notes(runs)]
    md.append(truncation.markdown(runs))
    contents = ["- [Knowledge cards](#knowledge-cards)"] + [f"- [{s.title}](#{_anchor(s.title)})" for s in sections]
    md += ["## Contents\n", "\n".join(contents) + "\n", "## Knowledge cards\n"]
    column = {f.title: f.name for f in FAMILIES.values()}
    for run in runs:
        entries = [e for s in sections for e in s.card.get(run.name, [])]
        md.append(render(run, entries, ctx.writer, heading="###", column=column))
    return md + [s.markdown for s in sections]


def _run_notes(runs: list[ModelRun]) -> list[tuple[ModelRun, str]]:
    """(run, note) of each run cut by ``--limit`` or pooled from shards."""
    from belief_tasks.report import shards
    from belief_tasks.report.loading import limit_note

    return [(r, note) for r in runs for note in (limit_note(r), shards.note(r)) if note]


def _runs_table(runs: list[ModelRun]) -> str:
    import pandas as pd

    from belief_tasks.report.loading import home_relative
    from belief_tasks.report.output import markdown_table

    return markdown_table(
        pd.DataFrame(
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
    )


def _summary(runs: list[ModelRun], sections: list[Section], path: Path, checked: int, mismatched: list[str]):
    """The terminal summary: the runs, the check, the truncated requests, each section's lines."""
    from belief_tasks.report import truncation

    summary = [f"belief-report: {len(runs)} model run(s), {len(sections)} section(s) -> {path}"]
    summary += [f"{r.name}: {note}" for r, note in _run_notes(runs)]
    if checked:
        summary.append(
            f"check: {checked - len(mismatched)}/{checked} recomputed numbers equal the results JSON"
            + ("" if not mismatched else f" (differing: {', '.join(mismatched[:10])})")
        )
    summary += [f"truncated: {line}" for line in truncation.notes(runs)]
    for s in sections:
        if s.summary:
            summary += [f"[{s.title}]"] + ["  " + line for line in s.summary]
    return summary


def _anchor(title: str) -> str:
    import re

    return re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")
