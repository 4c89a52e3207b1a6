"""Every message leads somewhere that works: BEAR statements too long, knobs from a task's own YAML, one
description of truncation, pages a pip user has."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from belief_tasks.hooks import truncation
from belief_tasks.options import COMMON, TRUNCATION_RULE

ROOT = Path(__file__).resolve().parents[1]


def _flat(text: str) -> str:
    return " ".join(text.split())


# ---------------------------------------------------------------- one description of truncation


@pytest.mark.parametrize("page", ["data", "backends", "scale"])
def test_truncation_is_described_in_the_one_wording(page):
    assert _flat(TRUNCATION_RULE) in _flat((ROOT / "docs" / f"{page}.md").read_text(encoding="utf-8"))


def test_no_page_or_knob_says_only_iclke_and_belief_icl_are_refused():
    knob = next(k for k in COMMON if k.name == truncation.KNOB)
    assert "BEAR" in knob.doc and "every probe of ours" in knob.doc
    stale = re.compile(
        r"(IC-LKE,? (and )?BELIEF-ICL)[^.]{0,40}allow_truncation|allow_truncation[^.]{0,80}\(IC-LKE, BELIEF-ICL\)"
    )
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert not stale.search(_flat(page.read_text(encoding="utf-8"))), page.name
    assert "(IC-LKE, BELIEF-ICL)" not in knob.doc


def test_bear_statement_refusal_says_allow_truncation_cannot_apply():
    cut = truncation.Truncation(max_length=8, requests=20, truncated=20, longest=14, max_cut=6, total_cut=90)
    text = str(truncation.TruncationError("belief_demo_bear", cut, "its statements", scored_whole=True))
    assert "allow_truncation cannot apply" in text and "AssertionError" in text
    assert '{"allow_truncation": true}' not in text  # never advice that ends in lm-eval's assertion
    assert "max_length=" in text and "relations and templates knobs" in text


@pytest.mark.usefixtures("one_torch_thread")
def test_bear_statements_longer_than_max_length_are_refused_even_with_allow_truncation(model_path):
    """The hostile case: max_length below BEAR's statements, allow_truncation set (it used to end in lm-eval's
    AssertionError after the advice to set it)."""
    from harness import evaluate

    with pytest.raises(truncation.TruncationError, match="allow_truncation cannot apply"):
        evaluate(
            ["belief_demo_bear"],
            f"pretrained={model_path},max_length=6",
            model="hf-shared",
            limit=1,
            metadata={"allow_truncation": True},
        )


# ---------------------------------------------------------------- a knob set by the task's own YAML


def test_a_knob_from_the_tasks_own_yaml_is_named_with_the_way_to_lift_it(model_path):
    from harness import run_cli

    out = run_cli(
        [
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_path}",
            "--tasks",
            "belief_demo_bear",
            "--metadata",
            json.dumps({"source": "sample", "budget": 0.5}),
        ],
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    line = next(line for line in out.stderr.splitlines() if line.startswith("belief-eval:"))
    assert "stopped before loading the model" in line
    assert (
        "max_facts_per_relation = 2 is set by this task's own YAML (belief_demo_bear.yaml), not by the command" in line
    )
    assert """lift it with --metadata '{"max_facts_per_relation": "all"}'""" in line
    assert "templates" not in line.split("(use one of the two)")[1]  # only the knobs of the conflict


# ---------------------------------------------------------------- pages a pip user has


def test_refusals_cite_a_page_that_ships_with_the_package(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "belief_tasks.commands.belief_eval", "--tasks", "x", "--metadata", "{bad"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "`python -m belief_tasks docs data` lists every check" in r.stderr and "docs/data.md" not in r.stderr


def test_docs_command_prints_a_shipped_page_and_names_a_typo():
    page = subprocess.run(
        [sys.executable, "-m", "belief_tasks", "docs", "data"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert page.returncode == 0 and page.stdout.startswith("# Data")
    typo = subprocess.run(
        [sys.executable, "-m", "belief_tasks", "docs", "datta"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert typo.returncode == 2 and "did you mean 'data'?" in typo.stderr


def test_the_wheel_ships_the_pages():
    """setup.py maps docs/ to belief_tasks/docs, so the command works after pip install."""
    text = (ROOT / "setup.py").read_text()
    assert 'package_dir["belief_tasks.docs"] = "docs"' in text and '"*.md"' in text


def test_knob_listing_points_to_shipped_pages():
    from belief_tasks.commands.help import knobs_listing

    listing = knobs_listing()
    assert "docs/" not in listing.replace("python -m belief_tasks docs", "")
    assert "`python -m belief_tasks docs budget`" in listing
