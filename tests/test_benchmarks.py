"""The benchmarks in one place (``benchmarks/``): one runner that knows every benchmark, shared workloads that give
two benchmarks naming the same workload the same requests, and pages that name the command behind every table."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import BENCHMARKS, HELPERS, workloads

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "benchmarks"
RUNNER = re.compile(r"python -m benchmarks ([a-z_]+)")  # NAME: a placeholder


def runner(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, cwd=str(ROOT), timeout=timeout
    )


# --- the runner ----------------------------------------------------------------------------------------------


def test_every_module_is_a_benchmark_with_a_main_or_a_named_helper():
    modules = {p.stem for p in HERE.glob("*.py")} - {"__init__", "__main__"}
    assert modules == set(BENCHMARKS) | set(HELPERS), modules ^ (set(BENCHMARKS) | set(HELPERS))
    for name in BENCHMARKS:
        tree = ast.parse((HERE / f"{name}.py").read_text(encoding="utf-8"))
        mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        assert mains and mains[0].args.args[0].arg == "argv", name
        assert ast.get_docstring(tree), name


def test_the_list_names_every_benchmark_without_importing_one():
    code = (
        "import json, sys\nfrom benchmarks.__main__ import main\nmain(['--list'])\n"
        "print(json.dumps([m for m in ('torch', 'lm_eval', 'transformers') if m in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert done.returncode == 0, done.stderr
    *listing, loaded = done.stdout.splitlines()
    assert json.loads(loaded) == []
    named = [line.split()[0] for line in listing if line.startswith("  ")]
    assert named == list(BENCHMARKS)
    assert runner("--list").returncode == 0


def test_an_unknown_benchmark_is_refused_in_one_line():
    done = runner("shraed")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == "python -m benchmarks: no benchmark named 'shraed'; --list names them all"
    assert runner().returncode == 2  # no name: the usage, on stderr


def test_a_benchmark_refuses_an_option_it_does_not_use():
    """``shared`` has no MONITOR workload: its sizes offer no --monitor_limit, rather than ignoring one."""
    from benchmarks import engines, shared

    with pytest.raises(SystemExit) as refused:
        shared.parse(["--monitor_limit", "3"])
    assert refused.value.code == 2
    args = engines.parse(["--workloads", "iclke,beer", "--model", "m"])
    with pytest.raises(SystemExit, match="no workload named beer"):
        engines.build_workloads(args)


# --- the shared workloads -----------------------------------------------------------------------------------


def test_quick_sizes_set_every_size_and_are_what_the_workloads_build(tmp_path):
    from benchmarks import engines

    args = engines.parse(["--quick", "--workloads", "iclke,bear,belief", "--model", "m"])
    quick = engines.QUICK
    assert (args.facts, args.instances, args.prompts, args.samples, args.monitor_limit) == (
        quick.facts,
        quick.instances,
        quick.prompts,
        quick.samples,
        quick.monitor_limit,
    )
    built = engines.build_workloads(args)
    assert len(built["iclke"]["groups"]) == quick.facts
    assert len(built["iclke"]["requests"]) == quick.facts * quick.options
    assert len(built["bear"]["groups"]) == quick.instances
    assert len(built["belief"]["requests"]) == quick.prompts * (1 + quick.samples)


def test_belief_requests_are_the_task_s_greedy_then_seeded_samples():
    from belief_tasks.facts.seeding import request_seed

    prompts = ["a b", "c d"]
    reqs = workloads.belief_requests(prompts, 3)
    assert [r[1][0] for r in reqs] == prompts + [p for p in prompts for _ in range(3)]
    assert all(kind == "generate_until" for kind, _ in reqs)
    assert [r[1][1] for r in reqs[:2]] == [workloads.GREEDY, workloads.GREEDY]
    samples = [r[1] for r in reqs[2:]]
    assert [kw["seed"] for _, kw in samples] == [request_seed(1234, p, i) for p in prompts for i in range(3)]
    assert all(kw["seed"] < 2**63 and kw.get("do_sample") for _, kw in samples)
    assert len({json.dumps(kw["until"]) for _, kw in samples[:3]}) == 3  # each sample of a prompt distinct


def test_shared_and_engines_time_the_same_requests():
    """The same sizes give ``shared`` and ``engines`` the same requests, in the same order."""
    from benchmarks import engines, shared

    sizes = ["--facts", "2", "--instances", "3", "--prompts", "2", "--samples", "2", "--options", "7"]
    built, groups, prompts, greedy = shared.build(shared.parse(sizes))
    theirs = engines.build_workloads(engines.parse([*sizes, "--model", "m", "--workloads", "iclke,bear,belief"]))
    for name in ("iclke", "bear", "belief"):
        ours = [(i.request_type, tuple(i.args)) for i in built[name][1]]
        assert ours == theirs[name]["requests"], name
    assert groups["iclke"] == theirs["iclke"]["groups"] == [7, 7]
    assert groups["bear"] == theirs["bear"]["groups"] and len(groups["bear"]) == 3
    assert len(greedy) == theirs["belief"]["greedy"] == len(prompts) == 2


def test_real_data_layout_is_checked_before_anything_runs(tmp_path):
    (tmp_path / "bear" / "BEAR").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no folder .*BEAR-big"):
        workloads.real_data_env(tmp_path)


# --- the pages name the command behind every figure -----------------------------------------------------------


def tables(text: str):
    """(line number of its first row, its rows, the text of its section before it) of every Markdown table."""
    lines = text.splitlines()
    section_start, i = 0, 0
    while i < len(lines):
        if lines[i].startswith("#"):
            section_start = i
        if lines[i].startswith("|"):
            start = i
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            yield start + 1, lines[start:i], "\n".join(lines[section_start:start])
        i += 1


def names_a_command(text: str) -> bool:
    # a benchmark, a project command, or a run of the harness's own command line through ours
    return bool(RUNNER.search(text)) or "python -m belief_tasks" in text or "belief-eval --" in text


def test_every_table_of_the_benchmarks_page_names_the_command_that_made_it():
    """In the table's section, before it; or, for a table of figures from several commands (the current timings),
    in every row: its command, or "same" (the row above's)."""
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    found = list(tables(page))
    assert len(found) >= 15
    for line, rows, before in found:
        names = RUNNER.findall(before) + [n for row in rows for n in RUNNER.findall(row)]
        assert set(names) <= set(BENCHMARKS), (line, names)
        if names_a_command(before):
            continue
        for row in rows[2:]:
            how = row.rstrip(" |").rsplit("|", 1)[-1]
            assert names_a_command(how) or how.strip().startswith("same"), f"docs/benchmarks.md:{line}: {row}"


def test_every_script_and_benchmark_named_anywhere_exists():
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    files += [
        p for d in ("belief_tasks", "benchmarks", "research", "scripts", "tests") for p in (ROOT / d).rglob("*.py")
    ]
    missing = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        missing += [f"{path.name}: {n}" for n in RUNNER.findall(text) if n not in BENCHMARKS]
        for folder, name in re.findall(r"\b(scripts|benchmarks)/(\w+\.(?:py|sh))\b", text):
            if not (ROOT / folder / name).is_file():
                missing.append(f"{path.name}: {folder}/{name}")
    assert not missing, missing
    assert len([p for p in (ROOT / "scripts").iterdir() if p.is_file()]) <= 10
