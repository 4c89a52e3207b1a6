"""A metric is named once: in its family's ``METRICS`` (``belief_tasks/scoring/<family>.py``). Every task YAML's
``metric_list``, every re-export in ``task_yamls/<family>/utils.py`` and every family doc's metric table is checked
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


def test_yaml_metric_lists_and_reexports_are_the_family_tables():
    assert metric_wiring(ROOT) == []


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
