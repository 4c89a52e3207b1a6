"""belief-report pools the shards of a run split by relation, and refuses shards that do not fit (report.shards).

Hand-written lm-eval folders (``test_report_synthetic.write_run``): BEAR records of relations R1 and R2 (hand values
``BEAR_HAND`` for the two together), one folder per relation block, each with the ``relations`` knob in its tasks'
metadata as ``--metadata`` leaves it. A real run on the bundled model: tests/test_scale_shards.py.
"""

from __future__ import annotations

import hashlib
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


# --------------------------------------------------------------------------- the shard knob (--shard_by_relation)


def knob_shard(root: Path, name: str, k: int, n: int, relations: str, tasks=("belief_bear",)) -> Path:
    """A shard of the ``shard`` knob: the user gave no relations; each task recorded the block it held."""
    records = [r for r in bear_records() if r["relation"] in relations.split(",")]
    folder = write_run(
        root / name,
        "org/m",
        {t: records for t in tasks},
        {t: harness_values(records) for t in tasks},
        metadata={t: {"seed": 0, "shard": f"{k}/{n}", "shard_relations": relations.split(",")} for t in tasks},
    )
    add_hashes(folder)
    return root / name


def add_hashes(folder: Path) -> None:
    """The three hashes lm-eval writes after ``filter`` and ``metrics`` in each samples line (write_run leaves them
    out), and lm-eval's ``sample_len`` in the results (what ``report.pooled_run`` reads and writes)."""
    for path in folder.glob("samples_*.jsonl"):
        lines = []
        for line in path.read_text().splitlines():
            s = json.loads(line)
            names = s["metrics"]
            tail = {n: s.pop(n) for n in names}
            target = hashlib.sha256(json.dumps(tail[names[0]], sort_keys=True).encode()).hexdigest()
            s.update(doc_hash="a" * 64, prompt_hash="b" * 64, target_hash=target, **tail)
            lines.append(json.dumps(s))
        path.write_text("\n".join(lines) + "\n")
    (results,) = folder.glob("results_*.json")
    data = json.loads(results.read_text())
    for task, row in data["results"].items():
        data["results"][task] = {"alias": row["alias"], "sample_len": data["n-samples"][task]["effective"], **row}
    results.write_text(json.dumps(data))


def test_shards_of_the_knob_pool_in_block_order_whatever_order_they_are_given(tmp_path):
    a, b = knob_shard(tmp_path, "k1", 1, 2, "R1"), knob_shard(tmp_path, "k2", 2, 2, "R2")
    (run,) = pool(load_runs([b, a]))
    assert [p.parent.name for p in run.shards] == ["k1", "k2"]
    task = run.tasks["belief_bear"]
    assert [r["relation"] for r in task.records()] == ["R1"] * 4 + ["R2"] * 2  # the unsharded run's order
    # the pooled configuration is the unsharded command's: no shard, and no relations the user did not give
    assert "shard" not in task.config["metadata"] and "shard_relations" not in task.config["metadata"]
    assert "relations" not in task.config["metadata"]


def test_a_missing_block_is_refused(tmp_path):
    a, c = knob_shard(tmp_path, "k1", 1, 3, "R1"), knob_shard(tmp_path, "k3", 3, 3, "R2")
    with pytest.raises(ShardError, match=r"block 2 of 3 is missing \(1/3, 3/3 here\)"):
        pool(load_runs([a, c]))


def test_blocks_are_disjoint_per_task_not_across_tasks(tmp_path):
    """Each task is cut on its own relations: R1 may be in the first shard of one task and in the second of another."""
    records = bear_records()
    folders = []
    for k, blocks in (
        (1, {"belief_bear": "R1", "belief_bear_big": "R1,R2"}),
        (2, {"belief_bear": "R2", "belief_bear_big": "R3"}),
    ):
        tasks = {t: [r for r in records if r["relation"] in rels.split(",")] for t, rels in blocks.items()}
        write_run(
            tmp_path / f"k{k}",
            "org/m",
            tasks,
            {t: harness_values(recs) for t, recs in tasks.items()},
            metadata={
                t: {"seed": 0, "shard": f"{k}/2", "shard_relations": rels.split(",")} for t, rels in blocks.items()
            },
        )
        folders.append(tmp_path / f"k{k}")
    (run,) = pool(load_runs(folders))
    assert len(run.tasks["belief_bear"].records()) == 6 and len(run.tasks["belief_bear_big"].records()) == 6


def test_the_pooled_run_is_written_as_one_runs_results_and_samples(tmp_path):
    from belief_tasks.report import pooled_run

    a, b = knob_shard(tmp_path, "k1", 1, 2, "R1"), knob_shard(tmp_path, "k2", 2, 2, "R2")
    whole = write_run(tmp_path / "whole", "org/m", {"belief_bear": bear_records()}, {"belief_bear": BEAR_HAND})
    add_hashes(whole)
    runs = load_runs([a, b])
    (run,) = pool(runs)
    ordered = [next(r for r in runs if r.folder == f) for f in run.shards]
    path = pooled_run.write(ordered, run, tmp_path / "pooled" / "org__m")
    data = json.loads(path.read_text())
    row = data["results"]["belief_bear"]
    for name, value in BEAR_HAND.items():  # recomputed from the pooled records, not the shards' mean
        assert math.isclose(row[f"{name},none"], value)
    assert row["sample_len"] == 6 and data["n-samples"]["belief_bear"] == {"original": 6, "effective": 6}
    (samples,) = (tmp_path / "pooled" / "org__m").glob("samples_belief_bear_*.jsonl")
    (one,) = whole.glob("samples_*.jsonl")
    assert samples.read_text() == one.read_text()  # doc_id counted on across the shards
    # lm-eval's task hash over the pooled samples
    lines = [json.loads(line) for line in one.read_text().splitlines()]
    expected = hashlib.sha256("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in lines).encode())
    assert data["task_hashes"]["belief_bear"] == expected.hexdigest()
    assert not list((tmp_path / "pooled").rglob("*.part"))
