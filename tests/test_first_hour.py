"""A researcher's first hour: every message, help and listing, as typed from the checkout root.

Each ``belief-eval`` case runs the command line as a subprocess with a model path that does not exist,
so reaching the model load would fail differently: the message must come first, in one paragraph,
exit status 2, no traceback.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import subprocess

import pytest

from harness import run_cli

NO_MODEL = "pretrained=/nonexistent/model"


def refused(out: subprocess.CompletedProcess) -> str:
    """The one ``belief-eval:`` paragraph of a refused command (and that it was refused properly)."""
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1, out.stderr[-3000:]
    assert "stopped before loading the model" in lines[0] and "Traceback" not in out.stderr, out.stderr[-3000:]
    return lines[0]


def test_invalid_metadata_json_is_one_paragraph_with_where_and_an_example():
    out = run_cli(
        ["--model", "hf", "--model_args", NO_MODEL, "--tasks", "belief_bear", "--metadata", "{'source': 'sample'}"],
        timeout=300,
    )
    line = refused(out)
    assert "--metadata is not valid JSON: expecting property name enclosed in double quotes at character 2" in line
    assert "{ >>>'source'" in line  # where
    assert """a valid example: --metadata '{"source": "sample", "max_facts_per_relation": 5}'""" in line
    json.loads("""{"source": "sample", "max_facts_per_relation": 5}""")  # the example itself is valid


def test_model_args_json_and_key_value_forms():
    from belief_tasks.commands.checks import CommandError, check_json_arguments

    check_json_arguments(["--model_args", "pretrained=x,dtype=float32", "--metadata", '{"seed": 1}'])
    with pytest.raises(CommandError, match=r"--model_args is not valid JSON: expecting value at character 16"):
        check_json_arguments(["--model_args", '{"pretrained": x}'])
    with pytest.raises(CommandError, match="--metadata is not valid JSON"):
        check_json_arguments(['--metadata={"seed": 1,}'])


def test_misspelt_task_gets_the_closest_names():
    line = refused(
        run_cli(
            [
                "--model",
                "hf",
                "--model_args",
                NO_MODEL,
                "--tasks",
                "belief_demo_baer,belief_bear",
                "--metadata",
                '{"source": "sample"}',
            ],
            timeout=300,
        )
    )
    assert "--tasks: no task or group named 'belief_demo_baer' (did you mean 'belief_demo_bear'" in line
    assert "belief_bear'" not in line.split("(did you mean")[0]  # the known name is not listed as missing
    assert "belief-eval ls belief" in line


def refused_backend(name: str) -> str:
    """The refusal of ``--model name`` on a sample task (the backend is checked before the tasks are built)."""
    args = ["--model", name, "--model_args", NO_MODEL, "--tasks", "belief_bear", "--metadata", '{"source": "sample"}']
    return refused(run_cli(args, timeout=300))


def test_misspelt_backend_gets_the_closest_names():
    line = refused_backend("hf-shard")
    assert "--model hf-shard: no backend of that name; did you mean 'hf-shared'" in line
    assert "ours are hf-mlm, hf-shared" in line and "vllm" in line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this Python")
@pytest.mark.parametrize("backend", ["vllm", "vllm-shared"])
def test_a_vllm_backend_without_vllm_is_refused_before_the_model(backend):
    line = refused_backend(backend)
    assert f"--model {backend}: this runs on vLLM's offline engine, and vLLM is not installed in this Python" in line
    assert "bash scripts/setup_vllm.sh" in line


def test_a_knob_no_requested_task_reads_is_refused_naming_its_readers():
    line = refused(
        run_cli(
            [
                "--model",
                "hf",
                "--model_args",
                NO_MODEL,
                "--tasks",
                "belief_bear",
                "--metadata",
                '{"source": "sample", "mp_templates": "all"}',
            ],
            timeout=300,
        )
    )
    assert "--metadata key 'mp_templates': no task of this command reads it (it runs belief_bear)" in line
    assert "it is read by belief_mp_4random" in line and "belief_qa_zeroshot" in line
    assert "belief_demo" not in line  # the main job's fixed variants are not offered


@pytest.fixture(scope="module")
def demo_tasks(model_path):
    """The main job's group, built as lm-eval builds it (no model): five tasks of four families."""
    import belief_tasks

    belief_tasks.install()
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    manager = TaskManager(
        include_path=str(task_yamls_dir()),
        include_defaults=False,
        metadata={"source": "sample", "pretrained": str(model_path)},
    )
    return list(manager.load(["belief_demo"])["tasks"].values())


def test_knobs_read_by_a_group_count_every_family_and_dataset(demo_tasks):
    from belief_tasks.commands.checks import check_knobs_read
    from belief_tasks.options import KnobError

    assert len(demo_tasks) == 5
    # one knob of each family in the group, and the path / revision of a dataset one of its tasks reads
    check_knobs_read(
        {
            "mp_templates": "all",
            "templates": "0",
            "n_examples": 5,
            "monitor_alpha": "1,0,0",
            "source": "sample",
            "bear_revision": "main",
            "myriadlama_revision": "main",
            "bear_big_path": "/x",
            "pretrained": "m",
            "dtype": "float32",
            "hellaswag_key": 1,
        },
        demo_tasks,
        model_args={"pretrained", "dtype"},
    )
    # the masked-LM family's knob, and data no task of the group reads (its MONITOR task is sample-only)
    for key, reader in (
        ("mlm_templates", "belief_mlm_myriadlama"),
        ("fktc_path", "belief_monitor"),
        ("trex_mc_revision", "belief_iclke"),
    ):
        with pytest.raises(KnobError, match=f"no task of this command reads it .*{reader}"):
            check_knobs_read({key: "x"}, demo_tasks, model_args=())
    with pytest.raises(KnobError, match="belongs in BELIEF_FKTC_PATH"):
        check_knobs_read({"fktc_path": "/x"}, demo_tasks, model_args=())
    # a model argument named like a knob is the model's
    check_knobs_read({"fktc_path": "/x"}, demo_tasks, model_args={"fktc_path"})


def test_belief_eval_help_adds_our_section_generated_from_the_knob_tables():
    from belief_tasks.commands.help import knob_groups

    out = run_cli(["--help"], timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    text = " ".join(out.stdout.split())  # wrapped lines joined
    assert "Language Model Evaluation Harness" in text  # lm-eval's own help comes first
    ours = text[text.index("belief-tasks: belief-eval is") :]
    for word in (
        "hf-shared",
        "hf-mlm",
        "belief-eval ls belief",
        "belief-eval ls knobs",
        "belief-report",
        "docs/report.md",
        "python -m belief_tasks demo",
    ):
        assert word in ours, word
    for _, names, page in knob_groups():
        assert all(name in ours for name in names) and page in ours
    assert {"mp_templates", "monitor_route", "n_examples", "bear_path"} <= {n for _, ns, _ in knob_groups() for n in ns}
    run_help = run_cli(["run", "--help"], timeout=300)
    assert run_help.returncode == 0 and "belief-tasks: belief-eval is" in run_help.stdout


def test_ls_belief_lists_only_ours_without_importing_lm_eval():
    from belief_tasks.commands.catalog import entries

    code = (
        "import sys; from belief_tasks.commands.belief_eval import main; main(['ls', 'belief']); "
        "print('lm_eval imported:', 'lm_eval' in sys.modules)"
    )
    out = run_cli(["-c", code], program="python_code", timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "lm_eval imported: False" in out.stdout
    lines = out.stdout.splitlines()
    for e in entries():
        assert any(line.startswith(e.name + " ") and e.description in line for line in lines), e.name
    assert "hellaswag" not in out.stdout
    assert len(lines) < 2 * len(entries()) + 10


def test_ls_knobs_lists_every_knob_with_what_it_accepts():
    from belief_tasks.commands.checks import _our_knob_names
    from belief_tasks.commands.help import knobs_listing

    text = knobs_listing()
    for name in _our_knob_names():
        assert f"  {name} " in text, name
    assert "mp_templates" in text and "Accepts one of 'manual', 'all'; default 'manual'." in " ".join(text.split())


def test_python_m_belief_tasks_help_is_a_clean_usage():
    out = run_cli(["--help"], program="belief_tasks", timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("usage: python -m belief_tasks COMMAND")
    assert "``" not in out.stdout and all(cmd in out.stdout for cmd in ("demo", "path", "model-path", "fetch-model"))
    wrong = run_cli(["dmeo"], program="belief_tasks", timeout=120)
    assert wrong.returncode == 2 and "did you mean 'demo'?" in wrong.stderr


def test_calibration_bins_are_not_logged_at_info(caplog):
    from test_report_synthetic import ICL_A

    from belief_tasks.scoring import belief_icl as B

    with caplog.at_level(logging.INFO, logger=B.log.name):
        B.agg_ovconf(ICL_A)
    assert not [r for r in caplog.records if "calibration bin" in r.getMessage()]
    with caplog.at_level(logging.DEBUG, logger=B.log.name):
        B.agg_ovconf(ICL_A)
    assert [r for r in caplog.records if "calibration bin" in r.getMessage() and r.levelno == logging.DEBUG]
