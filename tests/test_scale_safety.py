"""Safety (issue 9): no remote code unless asked, no eval/pickle on data, config paths stay inside the data folder."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from belief_tasks.data.sources import inside
from belief_tasks.facts.schema import SchemaError

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("belief_tasks", "metrics", "scripts", "benchmarks", "task_yamls")
CODE = [p for d in FOLDERS for p in sorted((ROOT / d).rglob("*.py"))]


# ------------------------------------------------------------------ trust_remote_code


def test_backends_default_to_no_remote_code():
    from lm_eval.models.huggingface import HFLM

    from belief_tasks.backends.mlm import HFMaskedLM
    from belief_tasks.backends.shared import HFSharedPrefixLM

    for cls in (HFLM, HFMaskedLM, HFSharedPrefixLM):
        params = inspect.signature(cls.__init__).parameters
        if "trust_remote_code" in params:
            assert params["trust_remote_code"].default in (False, None), cls
        else:  # inherits HFLM's keyword through **kwargs
            assert issubclass(cls, HFLM), cls


@pytest.fixture
def tokenizer_calls(monkeypatch):
    """Record what tasks pass to AutoTokenizer.from_pretrained, without loading anything."""
    import transformers

    calls = []

    class FakeTokenizer:
        mask_token = "[MASK]"

        def __call__(self, texts, **kw):
            return {"input_ids": [[1] for _ in texts]}

    def from_pretrained(name, *args, **kwargs):
        calls.append(kwargs.get("trust_remote_code", False))
        return FakeTokenizer()

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", staticmethod(from_pretrained))
    return calls


# metadata comes from --metadata JSON, where a user may well write "false"
FALSY = [False, "false", "False", "0", 0, "no", None]


@pytest.mark.parametrize("value", FALSY)
def test_tasks_load_tokenizers_without_remote_code_unless_asked(tokenizer_calls, value):
    from belief_tasks.tasks import base

    base._load_tokenizer.cache_clear()
    base.model_tokenizer({"pretrained": f"some/model-{value!r}", "trust_remote_code": value}, needed_for="a test")
    assert tokenizer_calls == [False], f"trust_remote_code={value!r} turned remote code on"


def test_tasks_pass_remote_code_on_when_asked(tokenizer_calls):
    from belief_tasks.tasks import base

    base._load_tokenizer.cache_clear()
    base.model_tokenizer({"pretrained": "some/model-asked", "trust_remote_code": True}, needed_for="a test")
    assert tokenizer_calls == [True]


def test_tasks_load_the_model_tokenizer_in_one_place():
    loaders = [
        p.name for p in sorted((ROOT / "belief_tasks" / "tasks").glob("*.py")) if "AutoTokenizer" in p.read_text()
    ]
    assert loaders == ["base.py"]


def test_no_literal_remote_code_in_our_code():
    hits = []
    for path in CODE:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.keyword) and node.arg == "trust_remote_code":
                if isinstance(node.value, ast.Constant) and node.value.value is True:
                    hits.append(f"{path}:{node.lineno}")
    assert not hits, hits


# ------------------------------------------------------------------ eval / pickle

UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
UNSAFE_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "joblib", "cloudpickle"}


def unsafe_uses(path: Path) -> list[str]:
    """Calls that could run code from data: eval/exec, pickle and friends, yaml.load without a
    safe loader, torch.load without weights_only=True, numpy/pandas pickle readers."""
    out = []
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            )
            if any(n.split(".")[0] in UNSAFE_MODULES for n in names):
                out.append(f"{where} imports {names}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
        kwargs = {k.arg: k.value for k in node.keywords}
        literal_import = name == "__import__" and all(isinstance(a, ast.Constant) for a in node.args)
        if isinstance(func, ast.Name) and name in UNSAFE_CALLS and not literal_import:
            out.append(f"{where} calls {name}()")
        if owner == "yaml" and name in ("load", "load_all"):
            loader = kwargs.get("Loader")
            if loader is None or not ("Safe" in ast.unparse(loader) or ast.unparse(loader) == "_Loader"):
                out.append(f"{where} yaml.{name} without a safe loader")
        if owner == "yaml" and name in ("unsafe_load", "full_load"):
            out.append(f"{where} yaml.{name}")
        if owner == "torch" and name == "load":
            wo = kwargs.get("weights_only")
            if not (isinstance(wo, ast.Constant) and wo.value is True):
                out.append(f"{where} torch.load without weights_only=True")
        if name in ("read_pickle", "from_pickle") or (
            "allow_pickle" in kwargs and ast.unparse(kwargs["allow_pickle"]) != "False"
        ):
            out.append(f"{where} {name} with pickle")
    return out


def test_data_never_goes_through_eval_or_pickle():
    assert CODE, "no code found"
    problems = [p for path in CODE for p in unsafe_uses(path)]
    assert not problems, problems


def test_the_scanner_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nimport yaml, torch\nx = eval('1')\n__import__('torch')\nyaml.load(s)\ntorch.load(f)\n"
        "yaml.load(s, Loader=yaml.SafeLoader)\ntorch.load(f, weights_only=True)\n"
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = unsafe_uses(bad)
    finally:
        ROOT = saved
    assert len(found) == 4, found  # pickle import, eval, unsafe yaml.load, unsafe torch.load


def test_stringified_lists_are_parsed_as_literals_only(tmp_path):
    """T-REx-MC's choice lists are strings: a code payload in one is a schema error, never run."""
    from belief_tasks.data.io import parse_list

    assert parse_list("['Rome', 'Paris']", file="f", row=1, field="Multiple Choices") == ["Rome", "Paris"]
    marker = tmp_path / "ran"
    payload = f"__import__('pathlib').Path({str(marker)!r}).write_text('x')"
    with pytest.raises(SchemaError) as err:
        parse_list(payload, file="f", row=1, field="Multiple Choices")
    assert err.value.field == "Multiple Choices"
    assert not marker.exists()


# ------------------------------------------------------------------ paths stay inside the data folder


@pytest.mark.parametrize("relative", ["../outside.jsonl", "a/../../outside.jsonl", "/etc/passwd", "link/escape.jsonl"])
def test_paths_from_configs_cannot_leave_the_data_folder(tmp_path, relative):
    root = tmp_path / "data"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")  # a symlink is followed before the check
    with pytest.raises(SchemaError) as err:
        inside(root, relative, file="metadata_relations.json", row="P1", field="relation id")
    assert err.value.file == "metadata_relations.json" and err.value.row == "P1" and err.value.field == "relation id"
    assert "leaves the data folder" in str(err.value)


def test_paths_inside_the_data_folder_are_fine(tmp_path):
    assert inside(tmp_path, "P36.jsonl", file="f", row=1, field="x") == (tmp_path / "P36.jsonl").resolve()
    assert inside(tmp_path, "sub/../P36.jsonl", file="f", row=1, field="x") == (tmp_path / "P36.jsonl").resolve()


def test_bear_relation_ids_cannot_point_outside(tmp_path):
    """A relation id in metadata_relations.json names a file: '../secret' must not be read."""
    from belief_tasks.data.bear import load_bear_folder

    folder = tmp_path / "BEAR"
    folder.mkdir()
    secret = tmp_path / "secret.jsonl"
    secret.write_text(json.dumps({"sub_id": "Q1", "sub_label": "France", "obj_id": "Q2", "obj_label": "Paris"}))
    meta = {
        "../secret": {
            "templates": ["The capital of [X] is [Y]."],
            "answer_space_labels": ["Paris"],
            "answer_space_ids": ["Q2"],
        }
    }
    (folder / "metadata_relations.json").write_text(json.dumps(meta))
    with pytest.raises(SchemaError) as err:
        load_bear_folder(folder)
    assert err.value.row == "../secret" and err.value.field == "relation id"
