"""Every task YAML of ours names a ``BeliefTask`` class, and its ``metric_list`` is its family's
metric table (``belief_tasks.scoring.<family>.METRICS``), the table the report recomputes from."""

from __future__ import annotations

from pathlib import Path

import pytest
from lm_eval.tasks._yaml_loader import load_yaml  # tests may read lm-eval's YAML loader; the product does not

from belief_tasks.paths import task_yamls_dir
from belief_tasks.families import FAMILIES, metric_table
from belief_tasks.tasks.base import BeliefTask

TASK_FILES = sorted(p for p in Path(task_yamls_dir()).rglob("*.yaml") if isinstance(load_yaml(p, resolve_func=False).get("task"), str))


def test_there_are_task_files_of_every_family():
    families = {load_yaml(p)["class"].FAMILY for p in TASK_FILES}
    assert families == set(FAMILIES)


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.stem)
def test_yaml_metric_list_is_the_family_table(path):
    cfg = load_yaml(path)
    cls = cfg["class"]
    assert isinstance(cls, type) and issubclass(cls, BeliefTask), f"{path.name}: class {cls!r} is not a BeliefTask"
    table = metric_table(cls.FAMILY)
    assert table, f"{path.name}: family {cls.FAMILY!r} has no metric table"
    for entry in cfg["metric_list"]:
        name = entry["metric"]
        assert name in table, f"{path.name}: metric {name} is not in {cls.FAMILY}.METRICS"
        agg, higher = table[name]
        assert entry["aggregation"] is agg, f"{path.name}: {name} aggregates with {entry['aggregation']!r}, the table with {agg!r}"
        assert entry["higher_is_better"] is higher, f"{path.name}: {name} higher_is_better"


def test_every_table_metric_is_wired_by_some_yaml():
    wired: dict[str, set] = {}
    for path in TASK_FILES:
        cfg = load_yaml(path)
        wired.setdefault(cfg["class"].FAMILY, set()).update(e["metric"] for e in cfg["metric_list"])
    for family in FAMILIES:
        assert set(metric_table(family)) <= wired.get(family, set()), family
