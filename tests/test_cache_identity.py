"""A request cache remembers whose answers it holds; belief-eval refuses another identity before the model loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from belief_tasks import cache_identity as C

ROOT = Path(__file__).resolve().parents[1]


def _model(folder: Path, hidden: int = 8) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": hidden}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def _belief_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "belief_tasks.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_model_args_parse_as_lm_eval_reads_them():
    assert C.parse_model_args(["pretrained=a/b,dtype=float32", '{"revision": "v1"}']) == {
        "pretrained": "a/b", "dtype": "float32", "revision": "v1"}


def test_first_use_records_the_identity_and_the_same_run_passes(tmp_path):
    prefix = str(tmp_path / "cache" / "run")
    model = _model(tmp_path / "m")
    assert C.check(prefix, "hf", {"pretrained": str(model), "dtype": "float32", "batch_size": "8"}) is None
    recorded = json.loads(Path(prefix + ".identity.json").read_text())
    assert recorded["backend"] == "hf" and recorded["model_args"]["dtype"] == "float32"
    assert "batch_size" not in recorded["model_args"]  # batching does not change the numbers
    assert set(recorded["local_files"]["pretrained"]) >= {"path", "config.json", "tokenizer.json", "model.safetensors"}
    # the same model at another batch size reuses it
    assert C.check(prefix, "hf", {"pretrained": str(model), "dtype": "float32", "batch_size": "64"}) is None


@pytest.mark.parametrize("change, named", [
    (lambda m: {"pretrained": str(_model(m.parent / "other", hidden=16)), "dtype": "float32"}, "pretrained"),
    (lambda m: {"pretrained": str(m), "dtype": "bfloat16"}, "model_args.dtype: 'bfloat16' here, 'float32' in the cache"),
    (lambda m: {"pretrained": str(m), "dtype": "float32", "revision": "v2"}, "model_args.revision"),
])
def test_another_model_or_setting_is_refused(tmp_path, change, named):
    prefix = str(tmp_path / "run")
    model = _model(tmp_path / "m")
    C.check(prefix, "hf", {"pretrained": str(model), "dtype": "float32"})
    with pytest.raises(C.CacheIdentityError) as err:
        C.check(prefix, "hf", change(model))
    assert named in str(err.value) and "give this run its own cache prefix" in str(err.value)


def test_another_backend_is_refused(tmp_path):
    prefix = str(tmp_path / "run")
    C.check(prefix, "hf", {"pretrained": "org/model"})
    with pytest.raises(C.CacheIdentityError, match="backend: 'hf-shared' here, 'hf' in the cache"):
        C.check(prefix, "hf-shared", {"pretrained": "org/model"})


def test_a_retrained_model_in_the_same_folder_is_refused(tmp_path):
    """Same path, same config, weights of the same size rewritten: the modification time tells."""
    prefix, model = str(tmp_path / "run"), _model(tmp_path / "m")
    C.check(prefix, "hf", {"pretrained": str(model)})
    weights = model / "model.safetensors"
    weights.write_bytes(b"\1" * 64)
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    with pytest.raises(C.CacheIdentityError, match="model.safetensors.mtime_ns"):
        C.check(prefix, "hf", {"pretrained": str(model)})


def test_hub_name_records_revision_and_cached_commit(tmp_path, monkeypatch):
    refs = tmp_path / "hub" / "models--org--model" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    ident = C.identity("hf", {"pretrained": "org/model"})
    assert ident["hub"] == {"name": "org/model", "revision": "main", "commit": "abc123"}


def test_a_cache_without_identity_is_adopted_with_a_warning(tmp_path):
    prefix = str(tmp_path / "run")
    Path(prefix + "_rank0.db").write_bytes(b"")  # filled by plain lm_eval
    warning = C.check(prefix, "hf", {"pretrained": "org/model"})
    assert "without an identity record" in warning and "cannot be checked" in warning
    assert Path(prefix + ".identity.json").is_file()


def test_belief_eval_refuses_another_models_cache_before_the_model_loads(tmp_path):
    prefix = str(tmp_path / "run")
    a, b = _model(tmp_path / "a", 8), _model(tmp_path / "b", 16)
    C.check(prefix, "hf", {"pretrained": str(a), "dtype": "float32"})
    Path(prefix + "_rank0.db").write_bytes(b"")
    r = _belief_eval("--model", "hf", "--model_args", f"pretrained={b},dtype=float32", "--tasks", "belief_demo_bear",
                     "--use_cache", prefix)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "holds the answers of another model or setting" in lines[0]
    assert "local_files.pretrained.config.json" in lines[0] and "stopped before loading the model" in lines[0]
