"""The stress run (issue 9): every family on broken copies of the sample, and under two processes, on a tiny random
model with the bundled model's tokenizer (``tiny_model_path``: what is checked is agreement, not knowledge).

1. Every family runs (tiny limits) in one process; each corpus-level aggregation gives the
   same number on its records shuffled, i.e. in the order lm-eval's gather leaves them
   (rank by rank), not the order of the docs.
2. The same families under ``accelerate launch`` with two CPU processes (``hf-shared``, which
   shards on CPU): every doc once, the same records and the same metrics as in one process.
3. Broken copies of the sample (``BELIEF_SAMPLE_DIR``): each family stops with one
   ``SchemaError`` naming file, row and field before the model sees a single request,
   and the CLI leaves no output file behind.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from test_scale_runs import accelerate_cpu, cli, load_run

from harness import evaluate

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("one_torch_thread")]

FAMILIES = ["belief_bear", "belief_mp_zeroshot", "belief_iclke", "belief_monitor_sample"]
LIMIT = 2
METADATA = {
    "source": "sample",
    "relations": "P36",
    "max_facts_per_relation": 2,
    "templates": "0",
    "confidence_samples": 2,
    "confidence_prompts": 1,
    "accuracy_draws": 200,  # BELIEF: greedy + 2 samples
    "n_examples": 4,
    "max_options": 8,  # IC-LKE
}
TOL = 1e-5
SHARED_TOL = 1e-4  # hf-shared: rows grouped differently in two processes (docs/backends.md)


@pytest.fixture(scope="module")
def lm(tiny_model_path):
    """One model for the in-process runs, with a count of every request it is asked."""
    from lm_eval.models.huggingface import HFLM

    import belief_tasks

    belief_tasks.install()  # before the methods are wrapped below: the seeded-sample hook patches HFLM's class

    model = HFLM(pretrained=str(tiny_model_path), device="cpu", dtype="float32", batch_size=8)
    model.calls = {}
    for name in ("loglikelihood", "generate_until", "loglikelihood_rolling"):
        method = getattr(model, name)

        def counted(requests, *a, _name=name, _method=method, **kw):
            model.calls[_name] = model.calls.get(_name, 0) + len(requests)
            return _method(requests, *a, **kw)

        setattr(model, name, counted)
    return model


def metadata(tiny_model_path) -> dict:
    return {**METADATA, "pretrained": str(tiny_model_path)}  # MONITOR cuts answers with the model's tokenizer


@pytest.fixture(scope="module")
def one_process(lm, tiny_model_path):
    lm.calls.clear()
    res = evaluate(FAMILIES, "", model=lm, metadata=metadata(tiny_model_path), limit=LIMIT)
    assert lm.calls.get("loglikelihood", 0) > 0 and lm.calls.get("generate_until", 0) > 0
    return res


def same(a, b, key=(), tol: float = TOL) -> None:
    """Records / metrics equal: strings, ints and structure exactly, floats to ``tol``, NaN to NaN."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), key
        for k in a:
            same(a[k], b[k], (*key, k), tol)
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), key
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, (*key, i), tol)
    elif isinstance(a, float) or isinstance(b, float):
        if math.isnan(a):
            assert math.isnan(b), key
        else:
            assert abs(a - b) <= tol * max(1.0, abs(a)), (key, a, b)
    else:
        assert a == b, (key, a, b)


def test_every_family_runs_and_its_aggregations_ignore_record_order(one_process, tiny_model_path):
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=metadata(tiny_model_path))
    tasks = tm.load(FAMILIES)["tasks"]
    for name in FAMILIES:
        result, samples = one_process["results"][name], one_process["samples"][name]
        assert result["sample_len"] == len(samples) == LIMIT, name
        aggregations = tasks[name].aggregation()
        shuffled = samples[::-1]  # with two records the one other order; gathered records come rank by rank
        for metric, agg in aggregations.items():
            if metric not in samples[0]:  # a metric this run's records have no value for is not reported
                assert f"{metric},none" not in result and not any(metric in s for s in samples), (name, metric)
                continue
            reported = result[f"{metric},none"]
            again = agg([s[metric] for s in shuffled])
            assert (math.isnan(reported) and math.isnan(again)) or abs(again - reported) <= 1e-12, (name, metric)
        # a run that scored nothing would have NaN or constant main metrics
        first = next(iter(aggregations))
        assert not math.isnan(result[f"{first},none"]), (name, first)


def _texts(resps) -> bool:
    return all(isinstance(x, str) for r in resps for x in r)


@pytest.fixture(scope="module")
def shared_one_process(tiny_model_path):
    """The families on ``hf-shared`` in one process: the reference of the two-process run (stock ``hf``
    shards only on CUDA devices, so the CPU launch below runs ``hf-shared``, which shards on CPU too)."""
    from belief_tasks.backends.shared import HFSharedPrefixLM

    model = HFSharedPrefixLM(pretrained=str(tiny_model_path), device="cpu", dtype="float32", batch_size=8)
    return evaluate(FAMILIES, "", model=model, metadata=metadata(tiny_model_path), limit=LIMIT)


def test_every_family_under_two_processes(shared_one_process, tiny_model_path, tmp_path):
    one_process = shared_one_process
    out = tmp_path / "two"
    args = [
        "--model",
        "hf-shared",
        "--model_args",
        f"pretrained={tiny_model_path},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        ",".join(FAMILIES),
        "--limit",
        str(LIMIT),
        "--metadata",
        json.dumps(METADATA),
        "--batch_size",
        "8",
        "--output_path",
        str(out),
        "--log_samples",
    ]
    proc = cli(args, launcher=accelerate_cpu(2), ACCELERATE_USE_CPU="1")
    assert "on rank 1" in proc.stdout + proc.stderr
    results, records = load_run(out)
    for name in FAMILIES:
        # generated texts (greedy answers and seeded samples) compared too; the log file keeps
        # log-likelihood responses as strings, and the records hold those numbers already
        ref = {
            s["doc_id"]: {**s[s["metrics"][0]], **({"resps": [r[0] for r in s["resps"]]} if _texts(s["resps"]) else {})}
            for s in one_process["samples"][name]
        }
        got = {
            doc: {k: v for k, v in r.items() if k != "resps" or k in ref[doc]}
            for (task, doc), r in records.items()
            if task == name
        }
        assert got.keys() == ref.keys(), name  # every doc once: none lost, none doubled
        # each rank builds its own prefix trees: log-likelihoods within hf-shared's float noise (1e-4 nats)
        same(got, ref, (name,), SHARED_TOL)
        ref_metrics = {
            k: v for k, v in one_process["results"][name].items() if isinstance(v, float) and "stderr" not in k
        }
        got_metrics = {k: results[name][k] for k in ref_metrics}
        same(got_metrics, ref_metrics, (name,), SHARED_TOL)


# ------------------------------------------------------------------ broken copies of the sample


def _break(folder: Path, relation: str, how: str) -> dict:
    """Break one thing in ``folder/<relation>.json``; returns the SchemaError fields to expect."""
    path = folder / f"{relation}.json"
    if how == "truncated":
        text = path.read_text()
        path.write_text(text[: len(text) // 2])
        return {"file": str(path)}
    if how == "not_utf8":
        path.write_bytes(path.read_bytes().replace(b'"facts"', b'"facts\xff"', 1))
        return {"file": str(path)}
    data = json.loads(path.read_text())
    fact = data["facts"][0]
    if how == "template_without_object":
        data["templates"][0]["text"] = data["templates"][0]["text"].replace("[Y]", "")
        expect = {"row": "templates[0]", "field": "text"}
    elif how == "empty_subject":
        fact["subject"] = {"label": "   "}
        expect = {"field": "subject.label"}
    elif how == "negative_is_object":
        fact["negatives"] = [fact["objects"][0]] + list(fact.get("negatives", []))[1:]
        expect = {"field": "negatives"}
    elif how == "duplicated_answer_space":
        data["answer_space"] = data["answer_space"] + data["answer_space"][:1]
        expect = {"field": "answer_space"}
    else:
        raise ValueError(how)
    path.write_text(json.dumps(data))
    return {"file": str(path), **expect}


BROKEN = [
    ("belief_bear", "template_without_object"),
    ("belief_mp_zeroshot", "empty_subject"),
    ("belief_iclke", "duplicated_answer_space"),
    ("belief_monitor_sample", "negative_is_object"),
    ("belief_bear", "truncated"),
    ("belief_mp_zeroshot", "not_utf8"),
]


@pytest.fixture
def broken_sample(tmp_path, monkeypatch):
    from belief_tasks.data import _load
    from belief_tasks.paths import PACKAGE_DIR

    folder = tmp_path / "sample"
    shutil.copytree(PACKAGE_DIR / "sample_data", folder)
    monkeypatch.setenv("BELIEF_SAMPLE_DIR", str(folder))
    _load.cache_clear()
    yield folder
    _load.cache_clear()


@pytest.mark.parametrize("task,how", BROKEN)
def test_broken_sample_stops_before_model_time(lm, tiny_model_path, broken_sample, task, how):
    from belief_tasks.facts.schema import SchemaError

    expect = _break(broken_sample, "P36", how)
    lm.calls.clear()
    with pytest.raises(SchemaError) as err:
        evaluate([task], "", model=lm, metadata=metadata(tiny_model_path), limit=LIMIT)
    for key, value in expect.items():
        assert getattr(err.value, key) == value, (key, str(err.value))
    assert err.value.file and err.value.row is not None, str(err.value)  # file and row, always
    assert sum(lm.calls.values()) == 0, f"the model was asked {lm.calls} before the data was checked"


def test_broken_sample_leaves_no_output(tiny_model_path, tmp_path):
    from belief_tasks.paths import PACKAGE_DIR

    folder = tmp_path / "sample"
    shutil.copytree(PACKAGE_DIR / "sample_data", folder)
    expect = _break(folder, "P36", "empty_subject")
    out = tmp_path / "out"
    args = [
        "--model",
        "hf-shared",
        "--model_args",
        f"pretrained={tiny_model_path},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        ",".join(FAMILIES),
        "--limit",
        "1",
        "--metadata",
        json.dumps(METADATA),
        "--output_path",
        str(out),
        "--log_samples",
    ]
    import subprocess
    import sys

    from harness import ROOT, env_with_checkout

    proc = subprocess.run(
        [sys.executable, "-m", "belief_tasks.commands.belief_eval", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env_with_checkout(BELIEF_SAMPLE_DIR=str(folder)),
        cwd=str(ROOT),
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    # one paragraph before the model loads (belief-eval), naming the file and the field
    assert "stopped before loading the model" in log and expect["file"] in log and "subject.label" in log
    assert "Traceback" not in log
    assert "Running loglikelihood requests" not in log and "Running generate_until requests" not in log
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*")), "a failed run left files behind"
