"""How a researcher reaches our tasks: bare lm_eval, --include_path, belief-eval, Python."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from belief_tasks.commands.catalog import entries

from harness import run_cli

ROOT = Path(__file__).resolve().parent.parent
CHEAP = [
    "--tasks",
    "belief_bear",
    "--limit",
    "1",
    "--batch_size",
    "8",
    "--metadata",
    '{"source": "sample", "relations": "P36", "max_facts_per_relation": 1}',
]


def _installed_task_dir() -> Path:
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent / "belief"


def _acc_line(stdout: str) -> str:
    rows = [line for line in stdout.splitlines() if line.startswith("|") and "belief_bear" in line]
    assert rows, stdout[-3000:]
    return rows[0]


def test_catalog_names_and_descriptions():
    found = entries()
    names = [e.name for e in found]
    assert len(names) == len(set(names)), "duplicate task or group names"
    assert all(n.startswith("belief_") for n in names), names
    missing = [e.name for e in found if not e.description]
    assert not missing, f"YAMLs without a '# description' first line: {missing}"
    for family in ("belief_mp", "belief_qa", "belief_icl", "belief_bear", "belief_iclke", "belief_monitor"):
        assert family in names, family


@pytest.mark.e2e
def test_bare_lm_eval_finds_installed_tasks(model_path):
    """Discovery 1: after `pip install .`, plain `lm_eval --tasks belief_...` works with no flag."""
    if not _installed_task_dir().is_dir():
        if os.environ.get("CI"):
            pytest.fail("the wheel did not install task_yamls under lm_eval/tasks/belief")
        pytest.skip("package not installed as a wheel here (pip install .); CI installs it")
    out = run_cli(
        ["--model", "hf", "--model_args", f"pretrained={model_path},dtype=float32", *CHEAP], program="lm_eval"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    _acc_line(out.stdout)
    assert re.search(r"\|\s*bear\s*\|.*\|\s*[0-9.]+\s*\|", out.stdout), out.stdout[-2000:]


@pytest.mark.e2e
def test_include_path_route(model_path):
    """Discovery 2: lm_eval --include_path "$(python -m belief_tasks path)"."""
    path = run_cli(["path"], program="belief_tasks")
    assert path.returncode == 0 and Path(path.stdout.strip(), "bear").is_dir()
    out = run_cli(
        [
            "--include_path",
            path.stdout.strip(),
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_path},dtype=float32",
            *CHEAP,
        ],
        program="lm_eval",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    _acc_line(out.stdout)


def test_belief_eval_lists_tasks_with_descriptions():
    """Discovery 3 and `ls tasks`: lm-eval's table, then ours with one-line descriptions."""
    out = run_cli(["ls", "tasks"])
    assert out.returncode == 0, out.stderr[-3000:]
    for e in entries():
        assert e.name in out.stdout
        line = next(line for line in out.stdout.splitlines() if line.startswith(e.name + " "))
        assert e.description in line
    assert "hellaswag" in out.stdout  # lm-eval's own tasks are still there


def test_belief_eval_registers_backends_without_hiding_builtins():
    code = (
        "import belief_tasks; belief_tasks.install(); from lm_eval.api.registry import get_model, model_registry; "
        "print(get_model('hf-mlm').__name__, get_model('hf-shared').__name__, get_model('hf').__name__, "
        "'vllm' in model_registry, 'local-completions' in model_registry)"
    )
    out = run_cli(["-c", code], program="python_code")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["HFMaskedLM", "HFSharedPrefixLM", "HFLM", "True", "True"]


def test_module_cli_prints_paths():
    from belief_tasks.commands.default_model import default_model_path
    from belief_tasks.paths import task_yamls_dir

    assert run_cli(["path"], program="belief_tasks").stdout.strip() == str(task_yamls_dir())
    assert run_cli(["model-path"], program="belief_tasks").stdout.strip() == str(default_model_path())
