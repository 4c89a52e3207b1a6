"""Visible work: a line before the tasks are built, progress in long loads, a warning for a missing samples file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_report_synthetic import BEAR_HAND, bear_records, write_run

from belief_tasks.report.cli import main as report_main

ROOT = Path(__file__).resolve().parents[1]


def test_a_missing_samples_file_is_a_warning_without_strict(tmp_path, capsys):
    folder = write_run(tmp_path / "runs", "m", {"belief_bear": bear_records()}, {"belief_bear": BEAR_HAND})
    for f in folder.glob("samples_*.jsonl"):
        f.unlink()  # a run without --log_samples
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "belief-report: warning: 1 task(s) without their samples file" in err
    assert "m / belief_bear: no samples file (run without --log_samples?)" in err and "--strict" in err
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "r"), "--strict"]) == 1


def test_belief_eval_says_it_builds_the_tasks_before_the_model():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "belief_tasks.commands.belief_eval",
            "--model",
            "dummy",
            "--tasks",
            "belief_demo_bear",
            "--metadata",
            '{"source": "sample", "budget": 0.5}',
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2  # refused at the build: the line came first, then the refusal
    lines = r.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Building the tasks"))
    refusal = next(i for i, line in enumerate(lines) if line.startswith("belief-eval: stopped"))
    assert first < refusal and "before the model loads" in lines[first]


def test_reading_a_large_myriadlama_shows_progress(monkeypatch, capsys):
    from belief_tasks.data import myriadlama

    monkeypatch.setattr(myriadlama, "PROGRESS_ROWS", 3)  # the real threshold is 200,000 rows (2.46 M in the hub copy)
    rows = [
        {
            "uuid": f"u{i}",
            "rel_uri": "P30",
            "sub_ent": "France",
            "obj_ents": ["Europe"],
            "obj_aliases": [[]],
            "obj_uris": ["Q46"],
            "template": "[X] is in [Y].",
            "is_manual": True,
        }
        for i in range(5)
    ]
    assert len(myriadlama.rows_to_factset(rows, "ml.jsonl")) == 5
    assert "Reading MyriadLAMA rows" in capsys.readouterr().err
    myriadlama.rows_to_factset(rows[:2], "ml.jsonl")
    assert "Reading MyriadLAMA rows" not in capsys.readouterr().err
