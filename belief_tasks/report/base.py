"""What every family section shares: the runs, recomputed numbers, and what a section hands back."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from belief_tasks.report.loading import ModelRun, TaskRun
from belief_tasks.report.output import ReportWriter
from belief_tasks.report.recompute import Number, recompute

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


def value(numbers: dict[str, Number], metric: str) -> float:
    n = numbers.get(metric)
    return float("nan") if n is None else n.value


def stderr(numbers: dict[str, Number], metric: str) -> float | None:
    n = numbers.get(metric)
    return None if n is None else n.stderr
