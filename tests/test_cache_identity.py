"""A request cache remembers whose answers it holds; belief-eval refuses another identity before the model loads."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from belief_tasks.hooks import answer_cache as C

ROOT = Path(__file__).resolve().parents[1]


def _model(folder: Path, hidden: int = 8) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": hidden}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def _belief_eval(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "belief_tasks.commands.belief_eval", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_model_args_parse_as_lm_eval_reads_them():
    assert C.parse_model_args(["pretrained=a/b,dtype=float32", '{"revision": "v1"}']) == {
        "pretrained": "a/b",
        "dtype": "float32",
        "revision": "v1",
    }


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


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda m: {"pretrained": str(_model(m.parent / "other", hidden=16)), "dtype": "float32"}, "pretrained"),
        (
            lambda m: {"pretrained": str(m), "dtype": "bfloat16"},
            "model_args.dtype: 'bfloat16' here, 'float32' in the cache",
        ),
        (lambda m: {"pretrained": str(m), "dtype": "float32", "revision": "v2"}, "model_args.revision"),
    ],
)
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
    r = _belief_eval(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={b},dtype=float32",
        "--tasks",
        "belief_demo_bear",
        "--use_cache",
        prefix,
    )
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "holds the answers of another model or setting" in lines[0]
    assert "local_files.pretrained.config.json" in lines[0] and "stopped before loading the model" in lines[0]


# --- belief-eval's default cache (cache_identity.with_answer_cache) ------------------------------------------


def test_belief_eval_keeps_answers_in_the_output_path_by_default(tmp_path):
    model = _model(tmp_path / "m")
    args = [
        "--model",
        "hf-shared",
        "--model_args",
        f"pretrained={model},dtype=float32",
        "--tasks",
        "belief_demo",
        "--output_path",
        str(tmp_path / "out"),
    ]
    with_cache = C.with_answer_cache(args)
    assert with_cache[:-2] == args and with_cache[-2] == "--use_cache"
    prefix = Path(with_cache[-1])
    assert prefix.parent == tmp_path / "out" / "cache" and re.fullmatch(r"m-hf-shared-[0-9a-f]{8}", prefix.name)
    # the same command: the same cache (the rerun resumes); lm-eval's short options read alike
    assert C.with_answer_cache(args)[-1] == str(prefix)
    assert C.with_answer_cache(
        ["-M", "hf-shared", "-a", f"pretrained={model}", "dtype=float32", "-o", str(tmp_path / "out")]
    )[-1] == str(prefix)
    # an output path ending in .json: lm-eval writes beside it, and so does the cache
    assert Path(C.with_answer_cache(args[:-1] + [str(tmp_path / "r.json")])[-1]).parent == tmp_path / "cache"
    # an explicit --use_cache wins; --no_answer_cache keeps nothing (and lm-eval never sees the flag); no output path
    assert C.with_answer_cache(args + ["--use_cache", "mine"]) == args + ["--use_cache", "mine"]
    assert C.with_answer_cache(args + ["-c", "mine"]) == args + ["-c", "mine"]
    assert C.with_answer_cache(args + [C.NO_ANSWER_CACHE]) == args
    assert C.with_answer_cache(args[:-2]) == args[:-2]


@pytest.mark.parametrize(
    "change",
    [
        lambda a, m: [*a[:3], f"pretrained={m},dtype=bfloat16", *a[4:]],  # a model argument that changes numbers
        lambda a, m: ["--model", "hf", *a[2:]],  # another backend
        lambda a, m: os.utime(m / "model.safetensors", ns=(1, 10**18)) or a,  # the model retrained in place
    ],
)
def test_another_model_setting_or_backend_opens_another_cache(tmp_path, change):
    """A changed model never reads the answers of the one before: its cache has another name."""
    model = _model(tmp_path / "m")
    args = ["--model", "hf-shared", "--model_args", f"pretrained={model},dtype=float32", "--output_path", str(tmp_path)]
    before = C.with_answer_cache(args)[-1]
    # batching and placement do not change the answers: the same cache
    assert C.with_answer_cache(args[:3] + [f"pretrained={model},dtype=float32,batch_size=64", *args[4:]])[-1] == before
    assert C.with_answer_cache(change(args, model))[-1] != before


def test_the_code_that_computes_answers_is_part_of_the_identity(tmp_path, monkeypatch):
    """Another lm-eval, torch or transformers, or a change in our own modules, opens another default cache."""
    model = _model(tmp_path / "m")
    ident = C.identity("hf", {"pretrained": str(model)}, with_software=True)
    assert set(ident["software"]) >= {"lm_eval", "torch", "transformers", "belief_tasks"}
    prefix = C.default_prefix(str(tmp_path), "hf", {"pretrained": str(model)})
    monkeypatch.setattr(C, "software", lambda: {**ident["software"], "belief_tasks": "another"})
    assert C.default_prefix(str(tmp_path), "hf", {"pretrained": str(model)}) != prefix
    # named with --use_cache, a default cache is checked with the code's identity too
    Path(prefix).parent.mkdir(parents=True)
    Path(prefix + C.SUFFIX).write_text(json.dumps(ident))
    with pytest.raises(C.CacheIdentityError, match="software.belief_tasks: 'another' here"):
        C.check(prefix, "hf", {"pretrained": str(model)})


def test_the_identity_file_is_written_once_answers_exist(tmp_path):
    """At exit, beside a cache that holds answers. A command refused before the model loads leaves no file behind,
    and so does one refused after lm-eval opened its cache with the model (the truncation check), before any
    answer: its empty cache file and the folders the run made go."""
    model = _model(tmp_path / "m")
    code = (
        "import sys; from pathlib import Path; from sqlitedict import SqliteDict; "
        "from belief_tasks.hooks import answer_cache as C; "
        f"a = C.with_answer_cache(['--model_args', 'pretrained={model}', '--output_path', {str(tmp_path / 'out')!r}]); "
        "print(a[-1]); db = Path(a[-1] + '_rank0.db'); "
        "sys.argv[1:] and db.parent.mkdir(parents=True); "
        "d = SqliteDict(str(db), autocommit=True) if sys.argv[1:] else None; "
        "d is not None and sys.argv[1] == 'answer' and d.__setitem__('k', 1); d is not None and d.close()"
    )
    for case in ([], ["empty"]):
        refused = subprocess.run(
            [sys.executable, "-c", code, *case], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert refused.returncode == 0 and not (tmp_path / "out").exists(), (case, refused.stderr)
    answered = subprocess.run(
        [sys.executable, "-c", code, "answer"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert answered.returncode == 0, answered.stderr
    prefix = answered.stdout.strip()
    recorded = json.loads(Path(prefix + C.SUFFIX).read_text())
    assert recorded == C.identity("hf", {"pretrained": str(model)}, with_software=True)


def test_a_server_is_identified_by_the_model_it_serves_not_its_port(tmp_path):
    """vLLM's ``/v1/models`` names the model a server loaded (``root``): the same model served on another port (a
    restarted server, a scheduler's new port) is the same identity and the same default cache, another model is
    not; a server that names no model keeps its ``base_url`` in the identity."""
    from fake_server import FakeServer

    model, other = _model(tmp_path / "m"), _model(tmp_path / "other", hidden=16)
    with (
        FakeServer(root=str(model), max_model_len=2048) as first,
        FakeServer(root=str(model), max_model_len=2048) as again,
        FakeServer(root=str(other), max_model_len=2048) as moved,
        FakeServer() as anonymous,
        FakeServer() as anonymous_again,
    ):

        def ident(server) -> dict:
            return C.identity("vllm-serve-shared", {"model": "fake-model", "base_url": server.url}, with_software=True)

        assert first.url != again.url and ident(first) == ident(again)
        assert ident(first)["served_model"] == {"id": "fake-model", "root": str(model), "max_model_len": 2048}
        assert "base_url" not in ident(first)["model_args"]
        assert ident(first)["local_files"]["served_model"]["config.json"]  # the folder it loaded, fingerprinted
        assert ident(moved) != ident(first)
        assert ident(anonymous) != ident(anonymous_again)  # nothing says which model: the address is all there is
        assert ident(anonymous)["model_args"]["base_url"] == anonymous.url

        def default_cache(server) -> str:
            args = ["--model", "vllm-serve-shared", "--model_args", f"model=fake-model,base_url={server.url}"]
            return C.with_answer_cache([*args, "--output_path", str(tmp_path / "out")])[-1]

        assert default_cache(first) == default_cache(again) != default_cache(moved)
