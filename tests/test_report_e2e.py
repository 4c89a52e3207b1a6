"""belief-report on real harness output: one short run of the bundled model over every family.

One ``belief-eval`` subprocess (``--output_path``, ``--log_samples``) is shared by all tests
of this module. The report must recompute every number of the harness's results JSON
exactly, from the logged records.
"""

from __future__ import annotations

import csv
import json
import math

import pytest

from harness import read_results, run_cli

pytestmark = pytest.mark.e2e

TASKS = ["belief_mp_zeroshot", "belief_mp_4template", "belief_bear", "belief_iclke", "belief_monitor_sample"]
#: one relation, two facts; few samples, draws, examples and options: a short run, every code path
METADATA = {
    "source": "sample",
    "relations": "P36",
    "max_facts_per_relation": 2,
    "confidence_samples": 2,
    "confidence_prompts": 2,
    "accuracy_draws": 500,
    "n_examples": 4,
    "max_options": 8,
    "templates": "0,1",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory, model_path):
    out = tmp_path_factory.mktemp("e2e") / "results"
    proc = run_cli(
        [
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_path},dtype=float32",
            "--tasks",
            ",".join(TASKS),
            "--metadata",
            json.dumps(METADATA),
            "--batch_size",
            "16",
            "--output_path",
            str(out),
            "--log_samples",
        ],
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def report(run, tmp_path_factory):
    from belief_tasks.report import build_report

    return build_report([run], tmp_path_factory.mktemp("report"))


def rows(report, name):
    with (report.path.parent / "tables" / f"{name}.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_every_number_equals_the_harness_results(run, report):
    harness = read_results(run)["results"]
    assert report.mismatched == []
    # every metric of every task with a numeric value was compared
    expected = sum(
        1
        for t in TASKS
        for k, v in harness[t].items()
        if "," in k and "_stderr" not in k and isinstance(v, (int, float))
    )
    assert report.checked >= expected > 40
    # and independently of the report's own check: a few table cells against the JSON
    t17 = {r["task"]: r for r in rows(report, "belief_icl_table17")}
    for task in ("belief_mp_zeroshot", "belief_mp_4template"):
        for m in ("acc", "acc_sd", "consist", "ovconf", "one_word_ratio"):
            assert math.isclose(float(t17[task][m]), harness[task][f"{m},none"], rel_tol=1e-9), (task, m)
        assert math.isclose(float(t17[task]["acc_stderr"]), harness[task]["acc_stderr,none"], rel_tol=1e-9)
    bear = rows(report, "bear_table3")[0]
    assert math.isclose(float(bear["bear"]), harness["belief_bear"]["bear,none"], rel_tol=1e-9)
    mon = rows(report, "monitor_table4_belief_monitor_sample")[0]
    assert math.isclose(float(mon["monitor"]), harness["belief_monitor_sample"]["monitor,none"], rel_tol=1e-9)
    ick = rows(report, "iclke_ranking_belief_iclke")[0]
    assert math.isclose(float(ick["acc_macro"]), harness["belief_iclke"]["acc_macro,none"], rel_tol=1e-9)


def test_tables_are_consistent_with_the_run(report):
    t17 = {r["task"]: r for r in rows(report, "belief_icl_table17")}
    # two facts of one relation, manual MP templates x subject expressions
    assert {r["facts"] for r in t17.values()} == {"2"}
    assert int(t17["belief_mp_zeroshot"]["prompts"]) >= 4
    # one relation: the per-relation cell is the macro average; BEAR's per-template mean is the BEAR score
    (rel,) = rows(report, "iclke_relations_belief_iclke")
    assert rel["relation"] == "P36"
    ick = rows(report, "iclke_ranking_belief_iclke")[0]
    assert math.isclose(float(rel[ick["model"]]), float(ick["acc_macro"]))
    per_t = rows(report, "bear_templates")
    assert sorted(r["Template"] for r in per_t) == ["0", "1"]
    bear = rows(report, "bear_table3")[0]
    assert math.isclose(sum(float(r["P@1"]) for r in per_t) / 2, float(bear["bear"]))
    # calibration bins: the two sampled prompts per task
    bins = rows(report, "belief_icl_calibration_bins")
    assert sum(int(b["size"]) for b in bins if b["task"] == "belief_mp_zeroshot") == 2


def test_agreement_joins_the_sample_by_fact_id_and_keys_every_fact(report):
    pairs = rows(report, "agreement_pairs_SmolLM2-135M-Instruct")
    assert len(pairs) == 10 and {p["datasets"] for p in pairs} == {"sample"}  # five probes, one dataset
    assert all(
        p["joined_by"] == (f"fact id {p['n']}" if p["n"] != "0" else "–") and p["conflicts"] == "0" for p in pairs
    )
    facts = rows(report, "agreement_facts_SmolLM2-135M-Instruct")
    assert facts and all(f["fact_key"].startswith("P36|") and f["relation"] == "P36" for f in facts)
    # one row per fact: where two probes probed it, both name it by the same id
    for f in facts:
        assert len({f[f"{t} fact_id"] for t in TASKS} - {""}) == 1


def test_report_files(report):
    out = report.path.parent
    text = report.path.read_text()
    for heading in ("## BELIEF-ICL", "## BEAR", "## IC-LKE", "## MONITOR", "### Knowledge card: SmolLM2-135M-Instruct"):
        assert heading in text
    figures = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert "belief_icl_sharing_mp.png" in figures and "bear_relations.png" in figures
    assert "iclke_acc_at_k_belief_iclke.png" in figures and "monitor_relations_belief_monitor_sample.png" in figures
    assert all((out / "figures" / f).stat().st_size > 5000 for f in figures)
    for link in [line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")]:
        assert (out / link).is_file(), link
    card = (out / "cards" / "SmolLM2-135M-Instruct.md").read_text()
    for family in ("BELIEF-ICL", "BEAR", "IC-LKE", "MONITOR"):
        assert family in card


def test_cli_prints_the_summary(run, tmp_path):
    proc = run_cli([str(run), "--out", str(tmp_path / "r"), "--strict"], program="belief_tasks.report.cli")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "recomputed numbers equal the results JSON" in proc.stdout
    assert "belief_mp_zeroshot" in proc.stdout and "MONITOR" in proc.stdout
    assert (tmp_path / "r" / "report.md").is_file()
