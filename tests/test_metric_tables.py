"""A metric is declared once: in its family's ``METRICS`` (``belief_tasks/scoring/<family>.py``), which wires every
task of the family (``BeliefTask.metric_table``; no YAML lists metrics). Every family doc's metric table is checked
against it, and the family docs' knob tables against the families' knob tables (``belief_tasks/families.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from lm_eval.tasks._yaml_loader import load_yaml  # tests may read lm-eval's YAML loader; the product does not

from belief_tasks.families import FAMILIES
from belief_tasks.report import family_sections

from harness import ROOT
from layout_checks import _task_files, doc_tables, metric_wiring


def test_there_are_task_files_of_every_family():
    families = {load_yaml(p)["class"].FAMILY for p in _task_files(ROOT)}
    assert families == set(FAMILIES)


def test_metrics_are_declared_once_and_wired_by_the_task_classes():
    assert metric_wiring(ROOT) == []


def test_a_declaration_holds_the_aggregation_its_direction_its_stderr_and_its_budgeted_statistic():
    from belief_tasks.metrics.budgeted import bear as bear_budgeted
    from belief_tasks.scoring import bear, belief_icl, monitor
    from belief_tasks.scoring.common import NoStderr, NotEstimable

    p_at_1 = bear.METRICS["p_at_1"]
    assert p_at_1.aggregation is bear.agg_p_at_1 and p_at_1.higher_is_better is True
    assert p_at_1.stderr is p_at_1.stderr_function is bear.p_at_1_stderr  # declared beside its aggregation
    cost = monitor.METRICS["cost_anchor_tokens"]
    assert isinstance(cost.stderr, NoStderr) and cost.stderr.reason and cost.stderr_function is None
    assert monitor.METRICS["monitor"].higher_is_better is False
    # the statistic is a function of metrics/budgeted/<family>.py: with its totals it gives P@1 by hand
    from belief_tasks.metrics.intervals import Totals

    T = Totals(np.array([[[3.0, 4.0], [1.0, 6.0]]]), {"top1": 0, "docs": 1})  # two relations: 3 of 4, 1 of 6 docs
    assert p_at_1.budgeted(T) == pytest.approx([4 / 10]) and p_at_1.budgeted.bounds == (0.0, 1.0)
    with pytest.raises(ValueError, match="P@2"):
        bear_budgeted.p_at(2)  # no per-fact column counts it
    spread = belief_icl.METRICS["acc_sd"].budgeted
    assert isinstance(spread, NotEstimable) and "spread" in spread.reason and not belief_icl.METRICS["acc_sd"].estimable
    assert FAMILIES["belief_icl"].budgeted.not_estimable == ("acc_range", "acc_sd")
    assert FAMILIES["bear"].budgeted.not_estimable == ("uncertainty", "uncertainty_correct", "uncertainty_incorrect")


def test_a_metric_without_its_budgeted_statistic_is_reported(monkeypatch):
    from dataclasses import replace

    from belief_tasks.scoring.budgeted import Estimators
    from belief_tasks.scoring.common import Metric, NotEstimable

    bear = FAMILIES["bear"]
    agg = bear.metrics["p_at_1"].aggregation
    se = bear.metrics["p_at_1"].stderr
    metrics = {
        **bear.metrics,
        "top_two": Metric(agg, se, True, None),
        "top_three": Metric(agg, se, True, NotEstimable(" ")),
    }
    monkeypatch.setitem(
        FAMILIES, "bear", replace(bear, metrics=metrics, budgeted=Estimators.of(bear.budgeted.units, metrics))
    )
    mlm = FAMILIES["belief_mlm"]
    monkeypatch.setitem(
        FAMILIES,
        "belief_mlm",
        replace(mlm, metrics={**mlm.metrics, "mrr": replace(mlm.metrics["mrr"], budgeted=NotEstimable("x"))}),
    )
    assert metric_wiring(ROOT) == [
        "bear: metric top_three is NotEstimable without a reason",
        "bear: metric top_two declares neither a budgeted statistic nor NotEstimable (Metric.budgeted)",
        "belief_mlm: metric mrr has a Metric.budgeted, but the family takes no budget (None)",
    ]


def test_a_metric_list_in_a_yaml_is_reported(tmp_path):
    shutil.copytree(ROOT / "task_yamls", tmp_path / "task_yamls")
    common = tmp_path / "task_yamls" / "bear" / "_bear_common_yaml"
    common.write_text(common.read_text() + "metric_list:\n  - metric: bear\n")
    assert metric_wiring(tmp_path) == [
        "bear/_bear_common_yaml: a metric_list (the task class wires its family's METRICS)"
    ]


def test_every_task_reports_exactly_its_family_table():
    """Each task YAML's class wires its family's METRICS (BELIEF for encoders: its prompt or its bias table)."""
    from belief_tasks.scoring.belief_mlm import BIAS_METRICS, PROMPT_METRICS
    from belief_tasks.tasks.base import read_options

    for path in _task_files(ROOT):
        cfg = load_yaml(path)
        cls = cfg["class"]
        task = cls.__new__(cls)
        task._options = read_options({}, cls.OPTIONS, cls.FAMILY)  # what BeliefTask.__init__ parses first
        table = task.metric_table({"metadata": {}})
        if cls.FAMILY == "belief_mlm":
            assert table is (BIAS_METRICS if "bias" in path.name else PROMPT_METRICS), path.name
        else:
            assert dict(table) == dict(FAMILIES[cls.FAMILY].metrics), path.name


def test_doc_tables_are_the_family_tables():
    assert doc_tables(ROOT) == []


def test_every_family_has_a_report_section_and_task_classes_with_its_knobs():
    assert set(family_sections()) == set(FAMILIES)
    assert all(mod.PROBES for mod in family_sections().values())
    classes = {load_yaml(p)["class"] for p in _task_files(ROOT)}
    assert all(cls.OPTIONS is FAMILIES[cls.FAMILY].options for cls in classes)
    assert {cls.FAMILY for cls in classes} == set(FAMILIES)


def test_a_missing_or_stale_doc_row_is_reported(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    bear = tmp_path / "docs" / "bear.md"
    text = bear.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `p_at_1`"))
    text = text.replace(row + "\n", "").replace("| `reduction` |", "| `reduce` |")
    bear.write_text(text, encoding="utf-8")
    assert sorted(doc_tables(tmp_path)) == [
        "docs/bear.md: knob table lacks reduction",
        "docs/bear.md: knob table lists reduce, no knob of bear",
        "docs/bear.md: metric table lacks p_at_1",
        "docs/bear.md: metric table lacks p_at_10",
        "docs/bear.md: metric table lacks p_at_5",
    ]


def test_a_family_doc_without_its_knob_table_is_reported(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "iclke.md"
    page.write_text(
        page.read_text(encoding="utf-8").replace(
            "| knob | accepts | default | what |", "| option | accepts | default | what |"
        )
    )
    assert doc_tables(Path(tmp_path)) == ["iclke: its doc docs/iclke.md has no knob table"]
