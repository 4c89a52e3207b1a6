"""The README followed literally: every example command names tasks and knobs that exist, and carries its cost;
later commands are written for the activated environment, which the README says how to get."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def example_commands() -> list[tuple[int, str]]:
    """(line number, command) of every `--tasks` command in the README's code (fenced or indented), continuation
    lines joined."""
    lines, out, i = README.splitlines(), [], 0
    while i < len(lines):
        line = lines[i].strip()
        if re.match(r"^(belief-eval|lm_eval|\.venv/bin/belief-eval)\b", line):
            start, cmd = i, line
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            if "--tasks" in cmd:
                out.append((start + 1, cmd.split(" #")[0]))
        i += 1
    return out


def _value(argv: list[str], option: str) -> str | None:
    return next((argv[k + 1] for k, a in enumerate(argv) if a == option and k + 1 < len(argv)), None)


def test_every_example_names_tasks_and_knobs_that_exist():
    from belief_tasks.commands.catalog import entries
    from belief_tasks.data.sources import SOURCE_KNOBS
    from belief_tasks.families import knob_names

    ours = {e.name for e in entries()}
    knobs = knob_names() | {k.name for k in SOURCE_KNOBS}
    found = example_commands()
    assert len(found) >= 3, found
    for lineno, cmd in found:
        argv = shlex.split(cmd)
        tasks = _value(argv, "--tasks").split(",")
        missing = [t for t in tasks if t.startswith("belief") and t not in ours]
        assert not missing, f"README line {lineno}: no task or group {missing}"
        metadata = _value(argv, "--metadata")
        if metadata:
            unknown = set(json.loads(metadata)) - knobs
            assert not unknown, f"README line {lineno}: no knob {sorted(unknown)}"


def test_every_example_carries_its_cost():
    lines = README.splitlines()
    for lineno, cmd in example_commands():
        after = "\n".join(lines[lineno : lineno + 14])
        assert re.search(r"(?m)^Cost", after), f"README line {lineno}: no cost note after {cmd[:60]!r}"
        if "pythia" in cmd or "--device cuda" in cmd:  # a GPU cost here is arithmetic, and says so
            assert "projection" in after and "not a measurement" in after, lineno


def test_later_commands_are_written_for_the_activated_environment():
    quick = README.index("## Quick start")
    note = README.index("source .venv/bin/activate")
    first_bare = README.index("belief-eval", quick)
    assert note < first_bare, "the activation note must come before the first bare belief-eval"


def test_the_card_says_sampled_metrics_can_differ_across_machines():
    assert re.search(r"Ovconf comes from sampled answers: a fresh demo on another machine can differ", README)
