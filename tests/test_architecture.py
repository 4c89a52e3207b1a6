"""docs/architecture.md is true: its layer table holds for every import of every module, and the report,
which sits below the harness glue, runs without lm-eval, torch or transformers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

from harness import ROOT, env_with_checkout
from layout_checks import layer_table, layers, lm_eval_internals


def test_every_import_follows_the_layer_table():
    assert layers(ROOT) == []


def test_only_the_adapter_imports_lm_eval_internals():
    """lm-eval's public routes where they are used; everything else of lm-eval through ``hooks/lm_eval_api.py``,
    where the differences between its releases live."""
    from belief_tasks.hooks.lm_eval_api import PUBLIC

    assert lm_eval_internals(ROOT, "belief_tasks/hooks/lm_eval_api.py", PUBLIC) == []


def test_the_internals_check_finds_an_internal_import(tmp_path):
    root = _fake_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from lm_eval.api.model import LM, hash_args\nimport lm_eval.evaluator\n",
            "hooks/lm_eval_api.py": "from lm_eval.api.model import hash_args\n",
        },
    )
    assert lm_eval_internals(root, "belief_tasks/hooks/lm_eval_api.py", {"lm_eval.api.model": frozenset({"LM"})}) == [
        "belief_tasks/a.py:1 imports lm_eval.api.model.hash_args, not a public route of lm-eval",
        "belief_tasks/a.py:2 imports lm_eval.evaluator, not a public route of lm-eval",
    ]


def test_the_layer_table_names_the_report_below_the_harness_glue():
    number = {name: n for n, name, _ in layer_table(ROOT)}
    assert number["scoring"] < number["families"] < number["report"] < number["harness glue"]


def _fake_package(tmp_path, files: dict[str, str]):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    for rel, text in files.items():
        path = tmp_path / "belief_tasks" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_check_finds_imports_upwards_circles_unplaced_modules_and_loading_by_name(tmp_path):
    root = _fake_package(
        tmp_path,
        {
            "__init__.py": "",
            "scoring/__init__.py": "",
            "scoring/x.py": "def f():\n    from belief_tasks.tasks import y  # inside a function: still an import\n",
            "tasks/__init__.py": "",
            "tasks/y.py": "from belief_tasks.tasks import z\n",
            "tasks/z.py": "from belief_tasks.tasks import y\n",
            "report/__init__.py": (
                "from importlib import import_module\nsections = import_module('belief_tasks.report.a')\n"
            ),
            "stray.py": "",
        },
    )
    assert sorted(layers(root)) == [
        "belief_tasks/report/__init__.py: loads a module by name",
        "belief_tasks/scoring/x.py (scoring) imports belief_tasks.tasks.y (harness glue), a layer above it",
        "belief_tasks/stray.py: in no layer (or in several) of docs/architecture.md",
        "circle: belief_tasks.tasks.y -> belief_tasks.tasks.z",
    ]


def test_layers_below_the_harness_glue_import_no_heavy_library():
    """Every module of layers 1 to 5 imported in a fresh process: lm-eval, torch, transformers, datasets stay out."""
    code = (
        "import importlib, json, sys\nsys.path.insert(0, 'tests')\nfrom pathlib import Path\n"
        "from layout_checks import modules_up_to\nmods = modules_up_to(Path('.').resolve(), 5)\n"
        "for m in mods:\n    importlib.import_module(m)\n"
        "heavy = ('lm_eval', 'torch', 'transformers', 'datasets')\n"
        "print(json.dumps([len(mods), [m for m in heavy if m in sys.modules]]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), env=env_with_checkout()
    )
    assert proc.returncode == 0, proc.stderr
    n_modules, heavy = json.loads(proc.stdout.splitlines()[-1])
    assert n_modules > 40 and heavy == []


def test_a_full_report_loads_neither_lm_eval_nor_torch(tmp_path):
    """Every family's records (shaped as ``process_results`` writes them), one model run; ``belief-report`` in a
    fresh process, which says at exit which of the heavy modules it loaded."""
    from test_report_synthetic import ICL_A, ICL_A_HAND, bear_records, iclke_run, mlm_record, monitor_record, write_run

    mlm = [mlm_record("f1", "t1", "paris", 1, 0.8), mlm_record("f2", "t1", "lyon", 2, 0.4)]
    monitor = [
        monitor_record(rel, f"{rel}_{i}", [0.8, 0.6], [[0.7, 0.6], [0.2, 0.3]], [[0.4, 0.5]], [1, 0])
        for rel in ("P1", "P2")
        for i in range(2)
    ]
    tasks = {
        "belief_mp_zeroshot": ICL_A,
        "belief_bear": bear_records(),
        "belief_iclke": iclke_run({"R1": {"a1"}}),
        "belief_mlm_myriadlama": mlm,
        "belief_monitor": monitor,
    }
    write_run(tmp_path / "runs", "m", tasks, {**{t: {} for t in tasks}, "belief_mp_zeroshot": ICL_A_HAND})
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print(json.dumps([m for m in ('lm_eval', 'datasets', 'torch', 'transformers') "
        "if m in sys.modules])))\n"
        "from belief_tasks.report.cli import main\n"
        f"sys.exit(main([{str(tmp_path / 'runs')!r}, '--out', {str(tmp_path / 'r')!r}, '--quiet', '--strict']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), env=env_with_checkout()
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
    report = (tmp_path / "r" / "report.md").read_text()
    from belief_tasks.families import FAMILIES

    for family in FAMILIES.values():  # each section titled by its family (belief_tasks.families)
        assert f"\n## {family.title}\n" in report
