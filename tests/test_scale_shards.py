"""Splitting a run across machines (docs/scale.md): two shards by relation, pooled by ``belief-report``, give the
report of one unsharded run, every family included (report.shards).

Each run is the command a user types (``belief-eval``), on a tiny random model (the comparison does not depend on
the weights) with the bundled model's tokenizer and the bundled sample, kept small: the main job's
group (BELIEF-ICL MP and QA, BEAR, IC-LKE, MONITOR) on 2 relations, one fact each, IC-LKE with 4 examples and 8
options; shards take relations P17 and P36, the unsharded run both. Stock ``hf`` at batch size 1 scores
each request alone, so a request's numbers do not depend on which others share its run, and the reports must be
equal to the digit: every table and the card (all but its stamp line, which names the shards and the date).
A budgeted run (BEAR at budget 0.05) is pooled the same way: its design is stratified by relation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import run_cli

pytestmark = pytest.mark.e2e

SHARDS = ("P17", "P36")
DEMO = {
    "source": "sample",
    "max_facts_per_relation": 1,
    "n_examples": 4,
    "max_options": 8,
    "confidence_samples": 4,
    "accuracy_draws": 500,
}
BUDGET = {"source": "sample", "budget": 0.05, "templates": "0"}


def command(tiny_model_path, out: Path, tasks: str, metadata: dict, relations: str) -> list[str]:
    """The ``belief-eval`` arguments of a run on ``relations``: stock hf at batch size 1 (each request alone)."""
    return [
        "--model",
        "hf",
        "--model_args",
        f"pretrained={tiny_model_path},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        tasks,
        "--metadata",
        json.dumps({**metadata, "relations": relations}),
        "--batch_size",
        "1",
        "--output_path",
        str(out),
        "--log_samples",
    ]


def run(tiny_model_path, out: Path, tasks: str, metadata: dict, relations: str) -> Path:
    proc = run_cli(command(tiny_model_path, out, tasks, metadata, relations), timeout=1800, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def report(inputs: list[Path], out: Path) -> tuple[dict[str, str], str]:
    """(tables/*.csv by name, the card without its stamp line) of ``belief-report INPUTS --out OUT``."""
    proc = run_cli([*map(str, inputs), "--out", str(out)], program="belief_tasks.report.cli", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "differ" not in proc.stdout + proc.stderr, proc.stdout[-3000:]
    (card,) = (out / "cards").glob("*.md")
    lines = card.read_text().splitlines()
    assert lines[2].startswith("model `") and " · run " in lines[2]  # the stamp line
    return {t.name: t.read_text() for t in sorted((out / "tables").glob("*.csv"))}, "\n".join(lines[:2] + lines[3:])


@pytest.fixture(scope="module")
def demo_whole(tiny_model_path, tmp_path_factory) -> Path:
    """The unsharded run of the main job's tasks on the four relations (shared by the tests that compare with it)."""
    return run(tiny_model_path, tmp_path_factory.mktemp("demo") / "whole", "belief_demo", DEMO, ",".join(SHARDS))


@pytest.mark.parametrize(
    "tasks, metadata", [("belief_demo", DEMO), ("belief_bear", BUDGET)], ids=["every-family", "budget"]
)
def test_two_shards_pooled_give_the_report_of_one_run(tiny_model_path, tmp_path, tasks, metadata, request):
    shards = [run(tiny_model_path, tmp_path / f"k{k}", tasks, metadata, rels) for k, rels in enumerate(SHARDS)]
    whole = (
        request.getfixturevalue("demo_whole")
        if tasks == "belief_demo"
        else run(tiny_model_path, tmp_path / "whole", tasks, metadata, ",".join(SHARDS))
    )
    tables, card = report(shards, tmp_path / "pooled")
    one_tables, one_card = report([whole], tmp_path / "one")
    assert tables.keys() == one_tables.keys()
    for name, text in one_tables.items():
        assert tables[name] == text, name
    assert card == one_card
    stamp = next((tmp_path / "pooled" / "cards").glob("*.md")).read_text().splitlines()[2]
    assert "pooled from 2 shards" in stamp
    if tasks == "belief_demo":  # every family's section, and agreement between the probes, from the pooled records
        assert {
            "belief_icl_table17.csv",
            "bear_table3.csv",
            f"agreement_pairs_{tiny_model_path.name}.csv",
        } <= tables.keys()
        assert any(n.startswith("iclke_ranking") for n in tables) and any(
            n.startswith("monitor_table4") for n in tables
        )
        assert "| facts | 2 per task (2 tasks) | 2 | 2 | 2 |" in card
    else:
        assert "estimated from 6 of" in card  # 3 facts drawn in each of the 2 relations
    # the shards' own numbers were checked against their results JSON
    text = (tmp_path / "pooled" / "report.md").read_text()
    assert "**Check:**" in text and "differing" not in text


def comparable(results: dict) -> dict:
    """A results JSON without what says when, where and with which cache it ran (and functions' addresses)."""
    import re

    skip = {"date", "start_time", "end_time", "total_evaluation_time_seconds", "pretty_env_info", "git_hash"}
    data = {k: v for k, v in results.items() if k not in skip}
    data["config"] = {k: v for k, v in data["config"].items() if k != "use_cache"}
    return json.loads(re.sub(r" at 0x[0-9a-fA-F]+", "", json.dumps(data)))


def test_shard_by_relation_writes_one_runs_results_and_resumes(tiny_model_path, tmp_path, demo_whole):
    """``belief-eval --shard_by_relation 2``: killed after its first shard, then run again, it skips that shard and
    ends with the results JSON, samples and report of one unsharded run (stock hf at batch size 1: exact)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from harness import ROOT, env_with_checkout, read_results

    whole = demo_whole
    out = tmp_path / "sharded"
    args = [*command(tiny_model_path, out, "belief_demo", DEMO, ",".join(SHARDS)), "--shard_by_relation", "2"]
    cmd = [sys.executable, "-m", "belief_tasks.commands.belief_eval", *args]
    env = env_with_checkout(OMP_NUM_THREADS="1")
    first = subprocess.Popen(cmd, env=env, cwd=str(ROOT), start_new_session=True, stderr=subprocess.DEVNULL)
    done = out / "shards" / "1-of-2" / "shard.json"
    deadline = time.time() + 1800
    while not done.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert done.exists()
    proc = run_cli(args, timeout=1800, OMP_NUM_THREADS="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "shard 1 of 2: finished by an earlier run of this command" in proc.stderr
    assert "shard 2 of 2: block 2" in proc.stderr and not (out / "shards").exists()
    assert comparable(read_results(out)) == comparable(read_results(whole))
    for one in sorted(whole.rglob("samples_*.jsonl")):
        task = one.name.rsplit("_", 1)[0]
        (pooled,) = out.rglob(f"{task}_*.jsonl")
        assert pooled.read_text() == one.read_text(), task
    tables, card = report([out], tmp_path / "pooled-report")
    one_tables, one_card = report([whole], tmp_path / "one-report")
    assert tables == one_tables and card == one_card
