"""What every family section shares: the runs, recomputed numbers, and what a section hands back."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from belief_tasks.report.loading import ModelRun, TaskRun
from belief_tasks.report.output import ReportWriter, pm
from belief_tasks.report.recompute import Number, recompute
from belief_tasks.scoring.common import NoStderr

#: the knowledge card's rows, in order
DIMENSIONS = ("accuracy", "robustness", "reliability", "coverage", "agreement")


@dataclass(frozen=True)
class CardEntry:
    """One line of a model's knowledge card."""

    dimension: str  # one of DIMENSIONS
    family: str
    measure: str
    text: str  # the formatted value(s)
    better: str = "higher"  # "higher", "lower" or "closer to 0"


@dataclass
class Section:
    title: str
    markdown: str
    summary: list[str] = field(default_factory=list)  # terminal lines
    card: dict[str, list[CardEntry]] = field(default_factory=dict)  # model name -> entries
    checks: list[tuple[str, bool]] = field(default_factory=list)  # (what, equal?) beyond Context.numbers


class Context:
    """The runs of a report, their recomputed numbers (cached), and the writer."""

    def __init__(self, runs: list[ModelRun], writer: ReportWriter):
        self.runs = runs
        self.writer = writer
        self._numbers: dict[tuple[str, str], dict[str, Number]] = {}

    def numbers(self, run: ModelRun, task: str) -> dict[str, Number]:
        key = (run.name, task)
        if key not in self._numbers:
            self._numbers[key] = recompute(run.tasks[task])
        return self._numbers[key]

    def all_numbers(self) -> dict[str, dict[str, Number]]:
        return {f"{r}:{t}": ns for (r, t), ns in self._numbers.items()}

    def tasks(self, pattern: str) -> list[tuple[ModelRun, TaskRun]]:
        """(run, task) for every task of ours whose probe (``TaskRun.probe``: the task that defines its
        data) fully matches ``pattern``; runs in order, tasks by name."""
        pat = re.compile(pattern)
        return [
            (run, task)
            for run in self.runs
            for _, task in sorted(run.tasks.items())
            if task.family and pat.fullmatch(task.probe)
        ]


#: the standard error of a metric a run does not report
ABSENT = NoStderr("not reported by this run")


def value(numbers: dict[str, Number], metric: str) -> float:
    n = numbers.get(metric)
    return float("nan") if n is None else n.value


def stderr(numbers: dict[str, Number], metric: str) -> float | NoStderr:
    """The metric's standard error, or ``NoStderr(reason)`` (the metric's own declaration, or why these records
    leave it undefined)."""
    n = numbers.get(metric)
    return ABSENT if n is None else n.stderr


class MetricTable:
    """A table of metrics, one row per task: each cell ``value ± stderr`` where the metric has a standard error
    (each ``Number`` says: the family's ``Metric`` declared it, and these records define it), the value alone
    where it has none; its CSV holds ``<metric>`` and ``<metric>_stderr`` (a float, or ``N/A``); ``note()`` says
    why a column has no ±, from the ``NoStderr`` reasons."""

    def __init__(self, columns: Sequence[tuple[str, str]]) -> None:
        self.columns = tuple(columns)  # (metric, header)
        self.shown: list[dict[str, Any]] = []
        self.raw: list[dict[str, Any]] = []
        self._reasons: dict[str, dict[str, None]] = {}  # header -> reasons, in order

    def add(self, labels: Mapping[str, Any], numbers: dict[str, Number], raw_labels: Mapping[str, Any] | None = None):
        """A row: ``labels`` (shown and in the CSV, or ``raw_labels`` there), then every column's cell. Returns
        (shown row, CSV row) for cells the caller adds after the metrics."""
        shown, raw = dict(labels), dict(labels if raw_labels is None else raw_labels)
        for metric, head in self.columns:
            v, se = value(numbers, metric), stderr(numbers, metric)
            shown[head] = pm(v, se)
            raw[metric], raw[f"{metric}_stderr"] = v, se
            if isinstance(se, NoStderr) and se is not ABSENT and not _missing(v):
                self._reasons.setdefault(head, {})[se.reason] = None
        self.shown.append(shown)
        self.raw.append(raw)
        return shown, raw

    def note(self) -> str:
        """ "No ±: <columns>: <reason>; ..." for the columns shown without a standard error, by reason."""
        by_reason: dict[str, list[str]] = {}
        for head, reasons in self._reasons.items():
            for reason in reasons:
                by_reason.setdefault(reason, []).append(head)
        parts = [f"{', '.join(heads)}: {reason}" for reason, heads in by_reason.items()]
        return f"No ± on {'; on '.join(parts)}." if parts else ""

    def write(self, writer: ReportWriter, name: str, caption: str = "") -> str:
        """The table (Markdown, its CSV beside it), its caption followed by ``note()``."""
        text = " ".join(part for part in (caption, self.note()) if part)
        return writer.table(pd.DataFrame(self.shown), name, text, csv=pd.DataFrame(self.raw))


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
