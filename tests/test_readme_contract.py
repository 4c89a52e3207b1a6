"""The README's Quick start is the contract: its commands are what CI runs, and its main job works when typed
from the checkout root, with no path tricks (the root is first on ``sys.path`` there, as for a user)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness import report_check

ROOT = Path(__file__).resolve().parent.parent
MARKS = {"setup": "# 1.", "main job": "# 2.", "tests": "# the tests"}


def quick_start_commands() -> dict[str, str]:
    """The Quick start's command lines, by the marks ``.ci/run`` looks for (the same rule as its awk)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README has no '## Quick start' section"
    lines = [line for line in section.group(1).splitlines() if line and not line.startswith(("`", "#", " "))]
    found = {}
    for what, mark in MARKS.items():
        hits = [line for line in lines if mark in line]
        assert hits, f"README's Quick start has no command marked {mark!r}"
        found[what] = hits[0]
    return found


def test_ci_runs_the_readme_commands_in_order():
    commands = quick_start_commands()
    assert commands["setup"].split("#")[0].split() == ["bash", "scripts/setup.sh"]
    assert commands["main job"].split("#")[0].split() == [".venv/bin/python", "-m", "belief_tasks", "demo"]
    ci = (ROOT / ".ci" / "run").read_text()
    marks = [ci.index(f'readme_line "{m}"') for m in MARKS.values()]
    assert marks == sorted(marks)
    order = [ci.index(f'step "{name}') for name in ("README step 1", "README step 2", "README test line")]
    assert order == sorted(order)


@pytest.mark.e2e
def test_main_job_typed_from_the_root(model_path, tmp_path):
    """The README's main job, as typed, from the checkout root (one doc per task to keep it short): it
    imports the checkout's package, ends in a report, and its recomputation check is N/N."""
    argv = shlex.split(quick_start_commands()["main job"].split("#")[0])
    if argv[0] == ".venv/bin/python" and not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("no .venv in this checkout: run the README's setup command")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env.update(
        BELIEF_DEMO_OUTPUT=str(tmp_path / "demo"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    proc = subprocess.run([*argv, "--limit", "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    check = report_check(proc.stdout)
    assert check and check[0] == check[1] > 0, out[-3000:]
    report = re.search(r"^report: (.+)$", proc.stdout, re.M)
    assert report and (ROOT / report.group(1)).is_file(), out[-3000:]
    assert "Traceback" not in out, out[-4000:]
