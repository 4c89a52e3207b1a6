"""The package the tests see is the one the README installs, and it is one package."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from harness import ROOT, env_with_checkout


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_with_checkout(), cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_tests_import_the_installed_package():
    import belief_tasks
    import belief_tasks.metrics

    installed = Path(belief_tasks.__file__).resolve().parent
    assert installed != ROOT / "belief_tasks", "tests must run against the installed package (README setup)"
    assert Path(belief_tasks.metrics.__file__).resolve().parent == installed / "metrics"
    assert list(belief_tasks.__path__) == [str(installed)]


def test_nothing_else_is_importable_under_the_package_name():
    for name in ("belief_tasks.belief_tasks", "belief_tasks.tests", "belief_tasks.scripts", "belief_tasks.setup"):
        assert importlib.util.find_spec(name) is None, name


def test_importing_a_metric_loads_no_harness_and_no_torch():
    heavy = ("torch", "transformers", "lm_eval", "datasets")
    code = ("import json, sys\nimport belief_tasks.metrics.belief, belief_tasks.metrics.bear, belief_tasks.metrics.iclke, "
            "belief_tasks.metrics.monitor, belief_tasks.metrics.belief_mlm, belief_tasks.metrics.comparison\n"
            f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))")
    assert json.loads(_run(code)) == []


def test_importing_the_package_patches_nothing():
    code = ("import json, sys, belief_tasks\nimport lm_eval.evaluator_utils as eu\nfrom lm_eval.api.model import CachingLM\n"
            "print(json.dumps([getattr(eu.stderr_for_metric, '_belief_tasks', False), "
            "getattr(CachingLM.__getattr__, '_belief_tasks', False)]))")
    assert json.loads(_run(code)) == [False, False]
