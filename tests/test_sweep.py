"""``belief-eval sweep`` over three tiny checkpoints: one run per checkpoint, one report, and resume after a kill.

The checkpoints are tiny Llama models (built from a config, different seeds) saved with the bundled model's
tokenizer, so a checkpoint costs well under a second to score.
"""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from belief_tasks.commands.default_model import default_model_path, is_ready  # noqa: E402

pytestmark = pytest.mark.skipif(
    not is_ready(), reason="the bundled model's tokenizer is not converted (scripts/setup.sh)"
)

METADATA = '{"source": "sample", "relations": "P1303", "max_facts_per_relation": 2, "templates": "0"}'
STEPS = (0, 5, 10)


def make_checkpoints(root: Path) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(default_model_path())
    for i, step in enumerate(STEPS):
        torch.manual_seed(i)
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=128,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
        )
        folder = root / f"checkpoint-{step}"
        LlamaForCausalLM(config).save_pretrained(folder)
        tok.save_pretrained(folder)
    return root


def sweep_args(ckpts: Path, out: Path) -> list[str]:
    return [
        "--checkpoints",
        str(ckpts),
        "--model",
        "hf",
        "--model_args",
        "dtype=float32",
        "--tasks",
        "belief_bear",
        "--metadata",
        METADATA,
        "--output_path",
        str(out),
        "--batch_size",
        "8",
        "--bootstrap_iters",
        "100",
    ]


def results_files(out: Path) -> dict[str, Path]:
    return {f"checkpoint-{s}": p for s in STEPS for p in (out / f"checkpoint-{s}").glob("*/results_*.json")}


def test_plan_orders_by_step_and_refuses_ambiguity(tmp_path):
    from belief_tasks.training.sweep import SweepError, plan

    for step in (200, 50, 1000):
        (tmp_path / "run" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "run" / f"checkpoint-{step}" / "config.json").write_text("{}")
    (tmp_path / "run" / "logs").mkdir()
    found = plan(str(tmp_path / "run"), None, {"dtype": "float32"})
    assert [c.step for c in found] == [50, 200, 1000]
    assert [c.label for c in found] == ["checkpoint-50", "checkpoint-200", "checkpoint-1000"]
    assert found[0].model_args == {
        "dtype": "float32",
        "pretrained": str((tmp_path / "run" / "checkpoint-50").resolve()),
    }
    # a glob and a comma list name the same folders
    assert plan(str(tmp_path / "run" / "checkpoint-*"), None, {}) == plan(
        ",".join(str(tmp_path / "run" / f"checkpoint-{s}") for s in (1000, 50, 200)), None, {}
    )

    # revisions: lm-eval's revision= model argument, one per checkpoint, pretrained= kept
    revs = plan(None, "step2000,step1000", {"pretrained": "EleutherAI/pythia-160m"})
    assert [c.model_args for c in revs] == [
        {"pretrained": "EleutherAI/pythia-160m", "revision": "step1000"},
        {"pretrained": "EleutherAI/pythia-160m", "revision": "step2000"},
    ]
    assert [c.label for c in revs] == ["revision-step1000", "revision-step2000"]

    with pytest.raises(SweepError, match="either --checkpoints"):
        plan(str(tmp_path / "run"), "step1", {"pretrained": "x"})
    with pytest.raises(SweepError, match="needs --model_args pretrained"):
        plan(None, "step1", {})
    with pytest.raises(SweepError, match="no step"):
        plan(None, "main", {"pretrained": "x"})
    with pytest.raises(SweepError, match="holds no model"):
        plan(str(tmp_path / "run" / "logs"), None, {})
    with pytest.raises(SweepError, match="leave it out"):
        plan(str(tmp_path / "run"), None, {"pretrained": "y"})


def test_revision_reaches_the_model_loader(tmp_path, monkeypatch):
    """Offline, no hub: the revision each checkpoint names is the ``revision=`` HFLM receives."""
    from belief_tasks.training import sweep

    seen = []

    class Stop(Exception):
        pass

    def create_from_arg_obj(args, extra):
        seen.append(dict(args))
        raise Stop

    from lm_eval.models.huggingface import HFLM

    monkeypatch.setattr(HFLM, "create_from_arg_obj", staticmethod(create_from_arg_obj))
    with pytest.raises(Stop):
        sweep.main(
            [
                "--revisions",
                "step20,step10",
                "--model",
                "hf",
                "--model_args",
                "pretrained=some/model",
                "--tasks",
                "belief_bear",
                "--metadata",
                METADATA,
                "--output_path",
                str(tmp_path / "out"),
            ]
        )
    assert seen == [{"pretrained": "some/model", "revision": "step10"}]


def test_sweep_runs_each_checkpoint_once_reports_and_resumes_after_a_kill(tmp_path, caplog):
    from belief_tasks.training import sweep

    ckpts = make_checkpoints(tmp_path / "run")
    out = tmp_path / "out"
    # a sweep killed (SIGKILL) once its first checkpoint is written
    log = (tmp_path / "killed.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "belief_tasks", "sweep", *sweep_args(ckpts, out)], stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 900  # generous: a shared CPU can be slow to import and index the tasks
    while not results_files(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    running = proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()
    assert running, (tmp_path / "killed.log").read_text()[-2000:]
    first = results_files(out)
    assert first and (out / "cache").is_dir()
    stamps = {k: p.stat().st_mtime_ns for k, p in first.items()}

    # the same command again: what is done is skipped, the rest is run, one report
    caplog.set_level(logging.INFO)
    assert sweep.main(sweep_args(ckpts, out)) == 0
    done = results_files(out)
    assert set(done) == {f"checkpoint-{s}" for s in STEPS}
    assert all(done[k] == p and p.stat().st_mtime_ns == stamps[k] for k, p in first.items())  # not rerun
    report = (out / "report" / "report.md").read_text()
    assert "## Knowledge over training" in report
    table = next((out / "report" / "tables").glob("training_0_*.csv")).read_text().splitlines()
    assert [line.split(",")[0] for line in table[1:]] == ["0.0", "5.0", "10.0"]
    numbers = {k: json.loads(p.read_text())["results"]["belief_bear"]["bear,none"] for k, p in done.items()}

    # a checkpoint whose results are lost but whose cache is there is scored from its cache alone
    last = done["checkpoint-10"].parent
    for f in last.iterdir():
        f.unlink()
    caplog.clear()
    assert sweep.main(sweep_args(ckpts, out)) == 0
    assert "Requests remaining: 0" in caplog.text
    again = json.loads(results_files(out)["checkpoint-10"].read_text())["results"]["belief_bear"]["bear,none"]
    assert again == numbers["checkpoint-10"]


def test_sweep_refuses_bad_input_before_any_model(tmp_path, capsys):
    from belief_tasks.training import sweep

    ckpts = tmp_path / "none"
    ckpts.mkdir()
    with pytest.raises(SystemExit) as e:
        sweep.main(sweep_args(ckpts, tmp_path / "out"))
    assert e.value.code == 2
    assert "holds no model" in capsys.readouterr().err
    make_checkpoints(tmp_path / "run")
    with pytest.raises(SystemExit) as e:
        sweep.main(
            [
                *sweep_args(tmp_path / "run", tmp_path / "out")[:-6],
                "--metadata",
                '{"budgt": 0.1}',
                "--output_path",
                str(tmp_path / "out"),
            ]
        )
    assert e.value.code == 2
    assert "budgt" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
