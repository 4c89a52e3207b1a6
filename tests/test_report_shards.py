"""belief-report pools the shards of a run split by relation, and refuses shards that do not fit (report.shards).

Hand-written lm-eval folders (``test_report_synthetic.write_run``): BEAR records of relations R1 and R2 (hand values
``BEAR_HAND`` for the two together), one folder per relation block, each with the ``relations`` knob in its tasks'
metadata as ``--metadata`` leaves it. A real run on the bundled model: tests/test_scale_shards.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_report_synthetic import BEAR_HAND, bear_records, read_csv, write_run

from belief_tasks.families import metric_table
from belief_tasks.report import build_report
from belief_tasks.report.cli import main as report_main
from belief_tasks.report.loading import load_runs
from belief_tasks.report.shards import ShardError, pool


def harness_values(records: list[dict]) -> dict[str, float]:
    """What lm-eval writes for these records: each metric's aggregation, as the task wires it."""
    return {name: m.aggregation(records) for name, m in metric_table("bear").items()}


def shard(root: Path, name: str, relations: str, model: str = "org/m", records=None, **meta) -> Path:
    """One shard's output folder: the BEAR records of ``relations`` (or ``records``), its results from them."""
    records = records if records is not None else [r for r in bear_records() if r["relation"] in relations.split(",")]
    write_run(
        root / name,
        model,
        {"belief_bear": records},
        {"belief_bear": harness_values(records)},
        metadata={"belief_bear": {"relations": relations, "seed": 0, **meta}},
    )
    return root / name


def test_two_shards_pool_into_the_numbers_of_one_run(tmp_path):
    a, b = shard(tmp_path, "k0", "R1"), shard(tmp_path, "k1", "R2")
    whole = shard(tmp_path, "whole", "R1,R2")
    pooled = build_report([a, b], tmp_path / "pooled")
    one = build_report([whole], tmp_path / "one")
    (run,) = pooled.runs
    assert [p.name for p in run.shards] == ["org__m", "org__m"] and run.name == "m"
    assert len(run.tasks["belief_bear"].records()) == 6
    # the pooled numbers: the hand values of R1 and R2 together, not a mean of the shards' (R1 alone: 0.75, R2: 0.5)
    t3 = read_csv(tmp_path / "pooled" / "tables" / "bear_table3.csv")[0]
    assert math.isclose(float(t3["bear"]), BEAR_HAND["bear"]) and math.isclose(float(t3["bear_1toN"]), 0.5)
    for table in sorted((tmp_path / "one" / "tables").glob("*.csv")):
        assert (tmp_path / "pooled" / "tables" / table.name).read_text() == table.read_text(), table.name
    # each shard checked against its own results JSON; the pooled numbers have none to be checked against
    assert pooled.mismatched == [] and pooled.checked == 2 * one.checked
    card = (tmp_path / "pooled" / "cards" / "m.md").read_text()
    assert "pooled from 2 shards" in card
    assert any("pooled from 2 shards" in line and "k0" in line and "k1" in line for line in pooled.summary)


def test_runs_on_the_same_relations_stay_separate_runs(tmp_path):
    """Today's multi-run report: two models (or one model twice) on the same block are compared, not pooled."""
    shard(tmp_path, "a", "R1,R2", model="org/a")
    shard(tmp_path, "b", "R1,R2", model="org/b")
    shard(tmp_path, "again", "R1,R2", model="org/a")
    assert sorted(r.name for r in pool(load_runs([tmp_path / "a", tmp_path / "b", tmp_path / "again"]))) == [
        "a (a)",
        "a (again)",
        "b",
    ]
    # runs without the relations knob (every relation) are never shards
    write_run(tmp_path / "x", "org/a", {"belief_bear": bear_records()[:4]}, {"belief_bear": {}})
    write_run(tmp_path / "y", "org/a", {"belief_bear": bear_records()[4:]}, {"belief_bear": {}})
    assert len(pool(load_runs([tmp_path / "x", tmp_path / "y"]))) == 2


@pytest.mark.parametrize(
    "change, field",
    [
        ({"model": "org/other"}, "model_name"),
        ({"seed": 1}, "configs.belief_bear.metadata.seed"),
        ({"templates": "0"}, "configs.belief_bear.metadata.templates"),
        ({"bear_revision": "v2"}, "configs.belief_bear.metadata.bear_revision"),
    ],
)
def test_a_shard_of_another_setting_is_refused(tmp_path, change, field):
    a = shard(tmp_path, "k0", "R1")
    model = change.pop("model", "org/m")
    b = shard(tmp_path, "k1", "R2", model=model, **change)
    with pytest.raises(ShardError) as err:
        pool(load_runs([a, b]))
    text = str(err.value)
    assert "look like shards of one run" in text and field in text and "--no-pool" in text
    assert str(a) in text and str(b) in text and "\n" not in text
    # --no-pool: each folder its own run, as before
    assert len(build_report([a, b], tmp_path / "r", pool=False).runs) == 2


def test_a_different_task_config_or_lm_eval_version_is_refused(tmp_path):
    a, b = shard(tmp_path, "k0", "R1"), shard(tmp_path, "k1", "R2")
    path = next((b / "org__m").glob("results_*.json"))
    data = json.loads(path.read_text())
    data["configs"]["belief_bear"]["target_delimiter"] = " "
    data["lm_eval_version"] = "0.4.12"
    path.write_text(json.dumps(data))
    with pytest.raises(
        ShardError,
        match=r"run\.lm_eval_version: absent in the first, '0\.4\.12' in the second; "
        r"configs\.belief_bear\.target_delimiter: absent in the first, ' ' in",
    ):
        pool(load_runs([a, b]))


def test_overlapping_relations_are_refused(tmp_path):
    a, b = shard(tmp_path, "k0", "R1"), shard(tmp_path, "k1", "R1,R2")
    with pytest.raises(ShardError, match="overlapping relations \\(R1\\)"):
        pool(load_runs([a, b]))
    assert report_main([str(a), str(b), "--out", str(tmp_path / "r")]) == 2
    assert report_main([str(a), str(b), "--out", str(tmp_path / "r"), "--no-pool"]) == 0


def test_a_shard_needs_its_records_and_no_limit(tmp_path):
    a, b = shard(tmp_path, "k0", "R1"), shard(tmp_path, "k1", "R2")
    samples = next((b / "org__m").glob("samples_*.jsonl"))
    samples.rename(samples.with_suffix(".bak"))
    with pytest.raises(ShardError, match="task belief_bear has no samples file .*--log_samples"):
        pool(load_runs([a, b]))
    samples.with_suffix(".bak").rename(samples)
    for folder in (a, b):  # the same --limit on both: still not a run's records
        path = next((folder / "org__m").glob("results_*.json"))
        data = json.loads(path.read_text())
        data["config"] = {"limit": 2.0}
        path.write_text(json.dumps(data))
    with pytest.raises(ShardError, match="ran with --limit 2"):
        pool(load_runs([a, b]))


def test_shards_of_two_models_pool_per_model(tmp_path):
    runs = pool(
        load_runs(
            [
                shard(tmp_path, "a0", "R1", model="org/a"),
                shard(tmp_path, "a1", "R2", model="org/a"),
                shard(tmp_path, "b0", "R1", model="org/b"),
                shard(tmp_path, "b1", "R2", model="org/b"),
            ]
        )
    )
    assert [(r.name, len(r.shards), len(r.tasks["belief_bear"].records())) for r in runs] == [("a", 2, 6), ("b", 2, 6)]


def test_budgeted_shards_pool_their_designs(tmp_path):
    """A budgeted run's design is stratified by relation: the shards' designs side by side are the run's."""

    def design(rels: dict) -> dict:
        return {
            "budget": 0.5,
            "seed": 0,
            "facts_drawn": sum(d for _, d in rels.values()),
            "facts_in_population": sum(p for p, _ in rels.values()),
            "relations": {r: {"population": p, "drawn": d} for r, (p, d) in rels.items()},
        }

    a = shard(tmp_path, "k0", "R1", budget=0.5, budget_design=design({"R1": (4, 2)}))
    b = shard(tmp_path, "k1", "R2", budget=0.5, budget_design=design({"R2": (2, 1)}))
    (run,) = pool(load_runs([a, b]))
    assert run.tasks["belief_bear"].budget_design == design({"R1": (4, 2), "R2": (2, 1)})
    c = shard(tmp_path, "k2", "R2", budget=0.2, budget_design=design({"R2": (2, 1)}))
    with pytest.raises(ShardError, match="metadata.budget: 0.5 in the first, 0.2 in the second"):
        pool(load_runs([a, c]))
