"""A metric is declared once: in its family's ``METRICS`` (``belief_tasks/scoring/<family>.py``), which wires every
task of the family (``BeliefTask.metric_table``; no YAML lists metrics). Every family doc's metric table is checked
against it, and the family docs' knob tables against the families' knob tables (``belief_tasks/families.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

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


def test_a_metric_list_in_a_yaml_is_reported(tmp_path):
    shutil.copytree(ROOT / "task_yamls", tmp_path / "task_yamls")
    common = tmp_path / "task_yamls" / "bear" / "_bear_common_yaml"
    common.write_text(common.read_text() + "metric_list:\n  - metric: bear\n")
    assert metric_wiring(tmp_path) == ["bear/_bear_common_yaml: a metric_list (the task class wires its family's METRICS)"]


def test_every_task_reports_exactly_its_family_table():
    """Each task YAML's class wires its family's METRICS (BELIEF for encoders: its prompt or its bias table)."""
    from belief_tasks.scoring.belief_mlm import BIAS_METRICS, PROMPT_METRICS

    for path in _task_files(ROOT):
        cfg = load_yaml(path)
        cls = cfg["class"]
        table = cls.metric_table(cls.__new__(cls), {"metadata": {}})
        if cls.FAMILY == "belief_mlm":
            assert table is (BIAS_METRICS if "bias" in path.name else PROMPT_METRICS), path.name
        else:
            assert dict(table) == dict(FAMILIES[cls.FAMILY].metrics), path.name


def test_doc_tables_are_the_family_tables():
    assert doc_tables(ROOT) == []


def test_every_family_has_a_report_section_and_a_glue_module():
    from belief_tasks.tasks import glue_modules

    assert set(family_sections()) == set(FAMILIES) == set(glue_modules())
    assert all(mod.PROBES for mod in family_sections().values())
    assert all(module.KNOBS is FAMILIES[name].knobs for name, module in glue_modules().items())


def test_a_missing_or_stale_doc_row_is_reported(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    bear = tmp_path / "docs" / "bear.md"
    text = bear.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `p_at_1`"))
    text = text.replace(row + "\n", "").replace("| `reduction` |", "| `reduce` |")
    bear.write_text(text, encoding="utf-8")
    assert sorted(doc_tables(tmp_path)) == ["docs/bear.md: knob table lacks reduction",
                                           "docs/bear.md: knob table lists reduce, no knob of bear",
                                           "docs/bear.md: metric table lacks p_at_1", "docs/bear.md: metric table lacks p_at_10",
                                           "docs/bear.md: metric table lacks p_at_5"]


def test_a_family_doc_without_its_knob_table_is_reported(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "iclke.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| knob | accepts | default | what |", "| option | accepts | default | what |"))
    assert doc_tables(Path(tmp_path)) == ["iclke: its doc docs/iclke.md has no knob table"]
