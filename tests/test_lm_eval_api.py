"""The lm-eval adapter (``belief_tasks.hooks.lm_eval_api``) on the installed release: the release CI tests (0.4.x),
and 0.5.0.dev1 beside the project (``PYTHONPATH=.lm-eval-0.5``, docs/architecture.md "lm-eval 0.5")."""

from __future__ import annotations

import pytest

from belief_tasks.hooks import lm_eval_api
from belief_tasks.tasks.base import BeliefTask


def test_each_patched_attribute_is_where_this_release_calls_it():
    points = lm_eval_api.patch_points()
    owner, attr = points["stderr"]
    assert owner.__name__ == ("lm_eval.api.metrics" if lm_eval_api.is_preview() else "lm_eval.evaluator_utils")
    assert attr == "stderr_for_metric" and callable(getattr(owner, attr))
    assert {name: a for name, (_, a) in points.items()} == {
        "stderr": "stderr_for_metric",
        "seeded samples": "generate_until",
        "tasks before the model": "process_tasks",
        "evaluated model": "evaluate",
    }


def test_a_request_is_built_in_its_place_from_what_construct_requests_was_given():
    doc = {"q": "x"}
    if lm_eval_api.is_preview():  # 0.5 calls construct_requests(doc, ctx, doc_id=..., apply_chat_template=...)
        given = {"doc_id": 3, "apply_chat_template": False, "chat_template": None}
    else:  # 0.4: metadata=(task, doc_id, repeats)
        given = {"metadata": ("belief_x", 3, 2), "apply_chat_template": False, "chat_template": None}
    req = lm_eval_api.instance("loglikelihood", doc, ("ctx", " cont"), 1, given, "belief_x", 2)
    assert (req.task_name, req.doc_id, req.repeats, req.idx, req.args) == ("belief_x", 3, 2, 1, ("ctx", " cont"))
    req.resps.append((-1.0, True))
    copy = lm_eval_api.derived_instance(req, request_type="generate_until", arguments=("ctx", {"until": ["\n"]}))
    assert (copy.task_name, copy.doc_id, copy.repeats, copy.request_type) == ("belief_x", 3, 2, "generate_until")
    assert copy.resps == [] and req.resps == [(-1.0, True)]  # no answer shared with the original


def test_metric_list_and_task_class_follow_the_release():
    entries = [{"metric": "acc", "aggregation": sum, "higher_is_better": True}]
    converted = lm_eval_api.metric_list(entries)

    class Probe(BeliefTask):
        FAMILY = "bear"

    combined = lm_eval_api.task_class(Probe, "multiple_choice")
    if lm_eval_api.is_preview():
        from lm_eval.api.task import Task

        assert converted[0]["metric"].__name__ == "acc" and converted[0]["aggregation"] is sum
        with pytest.raises(RuntimeError, match="process_results"):
            converted[0]["metric"]()
        assert issubclass(combined, Probe) and issubclass(combined, Task._registry["multiple_choice"])
        assert lm_eval_api.task_class(Probe, "multiple_choice") is combined  # one class per pair
    else:
        assert converted is entries and combined is Probe


def test_max_length_follows_hflm():
    class Config:
        max_position_embeddings = 8192

    class Tokenizer:
        model_max_length = 512

    assert lm_eval_api.max_length(Config(), Tokenizer()) == 8192
    assert lm_eval_api.max_length(None, Tokenizer()) == 512


def test_our_folder_alone_is_indexed_only_where_it_holds_every_requested_name(tmp_path):
    """``ours_alone``: our tasks, groups and tags (a wildcard too) run on an index of our folder alone; a name of
    lm-eval's, a YAML file, a folder or a user's own ``--include_path`` keeps lm-eval's whole index."""
    from belief_tasks.paths import task_yamls_dir

    ours = task_yamls_dir()
    assert lm_eval_api.ours_alone(["belief_demo", "belief_bear,belief_mp_4template"], str(ours), ours) == str(ours)
    assert lm_eval_api.ours_alone(["belief_demo_*"], str(ours), ours) == str(ours)
    assert lm_eval_api.ours_alone(["belief_demo", "hellaswag"], str(ours), ours) is None  # lm-eval's own task
    assert lm_eval_api.ours_alone(["belief_dmeo"], str(ours), ours) is None  # unknown: lm-eval says so, with hints
    assert lm_eval_api.ours_alone([str(ours / "demo")], str(ours), ours) is None  # a folder
    assert lm_eval_api.ours_alone(["belief_demo"], str(tmp_path), ours) is None  # a user's folder
    assert lm_eval_api.ours_alone([], str(ours), ours) is None
    built = lm_eval_api.task_manager(["belief_demo_bear"], str(ours), ours, metadata={"source": "sample"})
    assert "hellaswag" not in built.all_tasks and "belief_demo_bear" in built.all_tasks


def test_thinking_is_read_where_each_release_keeps_it():
    """0.4 keeps ``enable_thinking`` as HFLM's attribute; 0.5 only in ``chat_template_args`` (hf-shared read the
    attribute, and the demo stopped on 0.5 with an AttributeError)."""

    class Release04:
        enable_thinking = None
        chat_template_args = {"enable_thinking": True}  # the attribute wins where it exists

    class Release05:
        chat_template_args = {"enable_thinking": True}

    class Release05Default:
        chat_template_args: dict = {}

    assert lm_eval_api.thinking(Release04()) is False
    assert lm_eval_api.thinking(Release05()) is True
    assert lm_eval_api.thinking(Release05Default()) is False


@pytest.mark.e2e
def test_the_main_job_runs_and_its_report_checks_on_this_release(tiny_model_path, tmp_path):
    """The main job (``python -m belief_tasks demo``: every family on hf-shared, then the report and its check)
    through the installed release's whole path, on a tiny random model and 2 documents a task: CI runs this file on
    0.5.0.dev1 too. On 0.5 the demo once stopped in hf-shared on an attribute 0.5's HFLM dropped. On the pinned
    release the README's main job does the same (``test_readme_contract.py``), so this one is not run twice."""
    if not lm_eval_api.is_preview():
        pytest.skip("on the pinned lm-eval, test_readme_contract.py runs the main job and checks its report")
    import json
    import subprocess
    import sys

    from harness import ROOT, env_with_checkout, report_check

    out = tmp_path / "demo"
    model_args = f"pretrained={tiny_model_path},dtype=float32"
    run = subprocess.run(
        [sys.executable, "-m", "belief_tasks", "demo", "--model_args", model_args, "--limit", "2"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=str(ROOT),
        env=env_with_checkout(OMP_NUM_THREADS="1", BELIEF_DEMO_OUTPUT=str(out)),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    check = report_check(run.stdout)
    assert check and check[0] == check[1] > 0, run.stdout[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    for task in ("bear", "iclke", "monitor", "mp_4template", "qa_4template"):  # 0.5 names them belief_demo::...
        assert any(name.endswith(f"belief_demo_{task}") for name in results), sorted(results)
