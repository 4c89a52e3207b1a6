"""The package the tests see is the one the README installs, and it is one package."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ROOT, env_with_checkout


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with_checkout(), cwd=str(ROOT)
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _where(code: str, cwd: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env_with_checkout(), cwd=str(cwd)
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


WHERE = (
    "import json, pkgutil, belief_tasks, belief_tasks.metrics, belief_tasks.metrics.belief, belief_tasks.tasks\n"
    "print(json.dumps({'package': belief_tasks.__file__, 'metrics': belief_tasks.metrics.belief.__file__, "
    "'path': list(belief_tasks.__path__), "
    "'modules': sorted(m.name for m in pkgutil.walk_packages(belief_tasks.__path__, 'belief_tasks.') "
    "if not m.name.startswith('belief_tasks.task_yamls'))}))"
)


def test_one_package_from_the_root_and_from_elsewhere(tmp_path):
    """From the checkout root (where a user types ``python -m belief_tasks ...``) the checkout's folder is
    the package, metrics included; from any other folder it is the installed wheel; both hold the same
    modules, and nothing edits ``__path__``."""
    here = _where(WHERE, ROOT)
    assert Path(here["package"]).resolve().parent == ROOT / "belief_tasks"
    assert Path(here["metrics"]).resolve() == ROOT / "belief_tasks" / "metrics" / "belief.py"
    assert here["path"] == [str(ROOT / "belief_tasks")]
    elsewhere = _where(WHERE, tmp_path)
    installed = Path(elsewhere["package"]).resolve().parent
    assert installed != ROOT / "belief_tasks" and "site-packages" in installed.parts, installed
    assert Path(elsewhere["metrics"]).resolve() == installed / "metrics" / "belief.py"
    assert elsewhere["modules"] == here["modules"], (
        "the wheel and the checkout differ: reinstall (bash scripts/setup.sh)"
    )


def test_top_level_metrics_is_the_package_folder():
    """The design card's top-level ``metrics/`` is a link to ``belief_tasks/metrics`` (one copy of the code)."""
    link = ROOT / "metrics"
    assert link.is_symlink() and link.resolve() == ROOT / "belief_tasks" / "metrics"


def test_nothing_else_is_importable_under_the_package_name():
    for name in ("belief_tasks.belief_tasks", "belief_tasks.tests", "belief_tasks.scripts", "belief_tasks.setup"):
        assert importlib.util.find_spec(name) is None, name


def test_importing_a_metric_loads_no_harness_and_no_torch():
    heavy = ("torch", "transformers", "lm_eval", "datasets")
    code = (
        "import json, sys\nimport belief_tasks.metrics.belief, belief_tasks.metrics.bear, belief_tasks.metrics.iclke, "
        "belief_tasks.metrics.monitor, belief_tasks.metrics.belief_mlm, belief_tasks.metrics.comparison\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))"
    )
    assert json.loads(_run(code)) == []


def test_importing_the_package_patches_nothing():
    code = (
        "import json, sys, belief_tasks\nimport lm_eval.evaluator_utils as eu\n"
        "from lm_eval.models.huggingface import HFLM\n"
        "print(json.dumps([getattr(eu.stderr_for_metric, '_belief_tasks', False), "
        "getattr(HFLM.generate_until, '_belief_tasks', False)]))"
    )
    assert json.loads(_run(code)) == [False, False]


def test_install_replaces_only_the_attributes_docs_architecture_lists():
    """``install()`` patches three lm-eval attributes (``belief-eval`` adds ``EvaluatorConfig.process_tasks``);
    HFLM's rank, world size and ``_model_generate`` and CachingLM's ``__getattr__`` are lm-eval's own."""
    code = (
        "import json, os\nos.environ['WORLD_SIZE'] = '2'\nimport belief_tasks\nbelief_tasks.install()\n"
        "import lm_eval.evaluator as ev, lm_eval.evaluator_utils as eu\nfrom lm_eval.api.model import CachingLM\n"
        "from lm_eval.models.huggingface import HFLM\n"
        "from lm_eval.config.evaluate_config import EvaluatorConfig\n"
        "attrs = {'stderr_for_metric': eu.stderr_for_metric, 'evaluate': ev.evaluate, "
        "'HFLM.generate_until': HFLM.generate_until, 'HFLM._model_generate': HFLM._model_generate, "
        "'HFLM.rank': HFLM.rank.fget, 'HFLM.world_size': HFLM.world_size.fget, "
        "'CachingLM.__getattr__': CachingLM.__getattr__, 'process_tasks': EvaluatorConfig.process_tasks}\n"
        "print(json.dumps(sorted(k for k, v in attrs.items() if getattr(v, '_belief_tasks', False))))"
    )
    assert json.loads(_run(code)) == ["HFLM.generate_until", "evaluate", "stderr_for_metric"]


def test_an_empty_leftover_task_folder_is_not_an_installed_one(tmp_path, monkeypatch):
    """``pip uninstall`` of the wheel leaves ``lm_eval/tasks/belief`` empty: belief-eval must then still add
    ``--include_path`` (it found no task at all when it trusted the folder)."""
    import lm_eval.tasks

    from belief_tasks.commands import belief_eval as cli

    monkeypatch.setattr(lm_eval.tasks, "__file__", str(tmp_path / "__init__.py"))
    (tmp_path / "belief" / "bear").mkdir(parents=True)
    assert not cli._tasks_installed()
    (tmp_path / "belief" / "bear" / "belief_bear.yaml").write_text("task: belief_bear\n")
    assert cli._tasks_installed()


def test_pyproject_declares_the_lm_eval_releases_ci_tests():
    """``pip install .`` keeps a user's lm-eval where CI has tested it: the dependency is the range of the releases the
    hooks name (``lm_eval_api.TESTED``), and no wider."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from belief_tasks.hooks.lm_eval_api import LM_EVAL_RANGE, TESTED

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in deps if d.startswith("lm-eval")] == [f"lm-eval{LM_EVAL_RANGE}"]
    low, high = (part.lstrip("<>=") for part in LM_EVAL_RANGE.split(","))
    assert low == TESTED[0] and high.split(".")[:2] == TESTED[-1].split(".")[:2]
    assert int(high.split(".")[2]) == int(TESTED[-1].split(".")[2]) + 1  # below the next, untested release
