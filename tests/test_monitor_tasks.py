"""MONITOR harness glue: YAMLs, options, aggregations over records, and end-to-end runs on the bundled model."""

from __future__ import annotations

import json

import pytest

from belief_tasks.tasks import monitor as T


def test_generated_yamls_are_up_to_date():
    from belief_tasks.paths import task_yamls_dir

    folder = task_yamls_dir() / "monitor"
    rendered = T.render_yamls()
    assert len([n for n in rendered if n.startswith("belief_monitor_P")]) == 20
    for name, text in rendered.items():
        assert (folder / name).read_text() == text, f"{name} is stale: python -m belief_tasks.tasks.monitor task_yamls/monitor"


def test_tasks_and_group_are_indexed():
    from belief_tasks.paths import task_yamls_dir
    from lm_eval.tasks import TaskManager

    names = set(TaskManager(include_path=str(task_yamls_dir()), include_defaults=False).all_tasks)
    assert {"belief_monitor", "belief_monitor_sample", "belief_monitor_P17", "belief_monitor_P276"} <= names


def test_group_builds_its_20_subtasks_on_fktc(shared_data, model_path):
    from belief_tasks.paths import task_yamls_dir
    from lm_eval.tasks import TaskManager

    meta = {"fktc_path": str(shared_data / "fktc"), "pretrained": str(model_path)}
    loaded = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=meta).load(["belief_monitor"])
    tasks = loaded["tasks"]
    assert len(tasks) == 20
    assert sum(len(t.test_docs()) for t in tasks.values()) == 16198
    p264 = tasks["belief_monitor_P264"].test_docs()[0]
    assert len(json.loads(p264["anchors"])) == 1 + 6 + 5


def test_options_are_validated():
    s = T.run_settings({"monitor_alpha": "0.5,0.25,0.25", "only_correct_primary": "true", "answer_format": "bare"})
    assert s == {"route": "prefix", "answer_format": "{prompt}", "alpha": [0.5, 0.25, 0.25], "only_correct_primary": True}
    with pytest.raises(ValueError, match="monitor_route"):
        T.run_settings({"monitor_route": "beam"})
    with pytest.raises(ValueError, match="monitor_alpha"):
        T.run_settings({"monitor_alpha": "1,2"})


def test_no_tokenizer_or_wrong_source_fails_before_model_time(model_path):
    with pytest.raises(ValueError, match="tokenizer.*pretrained"):
        T.sample_dataset(source="sample")  # e.g. a chat API's model args: nothing to tokenise with
    with pytest.raises(ValueError, match="belief_monitor_sample"):
        T.fktc_dataset(monitor_relation="P101", source="sample", pretrained=str(model_path))
    with pytest.raises(ValueError, match="could not load the tokenizer"):
        T.sample_dataset(source="sample", model="gpt-4o-mini")


def test_sample_docs(model_path):
    docs = T.sample_dataset(source="sample", pretrained=str(model_path), relations="P36", max_facts_per_relation=3)["test"]
    assert len(docs) == 3 and {d["relation"] for d in docs} == {"P36"}
    anchors = json.loads(docs[0]["anchors"])
    assert [a["kind"] for a in anchors] == ["positive"] + ["frame"] * 7 + ["negative"] * 5
    assert anchors[0]["text"].startswith(f"Question: {docs[0]['object']}. ")


def _record(rel, primary, frames, negatives, correct, positive_correct=1, **kw):
    return {"relation": rel, "primary": primary, "frames": frames, "negatives": negatives, "correct": correct,
            "positive_correct": positive_correct, "alpha": [0.33, 0.33, 0.33], **kw}


RECORDS = [
    # P1: fact A (1 subword) and fact B (2 subwords) of test_monitor_metrics; P2: one fact with PFD = IRD = 0
    _record("P1", [0.8], [[0.6], [0.2]], [[0.4], [0.8], [0.5]], [1, 0]),
    _record("P1", [0.9, 0.5], [[0.5, 0.5], [0.9, 0.1]], [[0.1, 0.5]], [1, 1], positive_correct=0),
    _record("P2", [0.5], [[0.5], [0.5]], [[0.5]], [0, 0]),
]


def test_aggregations_score_each_relation_then_average():
    p1 = 0.41511  # hand-computed in test_monitor_metrics
    assert T.agg_monitor(RECORDS) == pytest.approx((p1 + 0.0) / 2, abs=1e-5)
    assert T.agg_pfd(RECORDS) == pytest.approx(((0.4 + 0.2) / 2 + 0) / 2)
    assert T.agg_primary_prob(RECORDS) == pytest.approx(((0.8 + 0.7) / 2 + 0.5) / 2)
    assert T.agg_acc_avg(RECORDS) == pytest.approx(((1 + 0.5) / 2 + 0) / 2)
    assert T.agg_acc_max(RECORDS) == pytest.approx((1 + 0) / 2)
    assert T.agg_acc_frame_1(RECORDS) == pytest.approx((0.5 + 0) / 2)
    assert T.agg_acc_positive(RECORDS) == pytest.approx((0.5 + 1) / 2)
    assert T.agg_monitor.stderr(RECORDS) > 0


def test_only_correct_primary_drops_facts_from_anchor_metrics_only():
    flagged = [dict(r, only_correct_primary=True) for r in RECORDS]
    # P1 keeps fact A only: sqrt(.33 (.4^2 + (.7/3)^2 + .4 * .7/3)) / .8
    fact_a = (0.33 * (0.16 + (0.7 / 3) ** 2 + 0.4 * 0.7 / 3)) ** 0.5 / 0.8
    assert T.agg_monitor(flagged) == pytest.approx((fact_a + 0.0) / 2)
    assert T.agg_acc_avg(flagged) == T.agg_acc_avg(RECORDS)


def _sample_run(model_path, model: str, route: str) -> dict:
    from harness import evaluate

    return evaluate(["belief_monitor_sample"], f"pretrained={model_path},dtype=float32", model=model, device="cpu",
                    metadata={"pretrained": str(model_path), "relations": "P36", "max_facts_per_relation": 3,
                              "monitor_route": route},
                    gen_kwargs="max_gen_toks=6", batch_size=16)


@pytest.fixture(scope="module")
def prefix_run(model_path):
    return _sample_run(model_path, "hf", "prefix")


@pytest.mark.e2e
def test_sample_end_to_end(prefix_run):
    r = prefix_run["results"]["belief_monitor_sample"]
    # the gold object is likelier when the context states it than under a wrong entity or no context
    assert r["primary_prob,none"] > r["frame_prob,none"] > 0
    assert r["primary_prob,none"] > r["negative_prob,none"] > 0
    assert 0 < r["monitor,none"] < float("inf") and r["monitor_stderr,none"] > 0
    assert 0 < r["pfd,none"] < 1 and 0 < r["ird,none"] < 1
    samples = prefix_run["samples"]["belief_monitor_sample"]
    rec = samples[0]["monitor"]
    assert len(rec["frames"]) == 7 and len(rec["negatives"]) == 5 and len(rec["answers"]) == 7
    assert all(len(a) == len(rec["units"]) for a in [rec["primary"], *rec["frames"], *rec["negatives"]])
    assert "".join(rec["units"]) == " " + rec["object"]
    # recomputable from the logged records
    assert T.agg_monitor([s["monitor"] for s in samples]) == pytest.approx(r["monitor,none"])


@pytest.mark.e2e
def test_fktc_six_frame_relation_through_the_cli(shared_data, model_path, tmp_path):
    """`belief-eval` passes --model_args to the task (tokenizer from pretrained=), on a real FKTC file."""
    from harness import read_results, run_cli

    proc = run_cli([
        "--model", "hf", "--model_args", f"pretrained={model_path},dtype=float32", "--device", "cpu",
        "--tasks", "belief_monitor_P276", "--limit", "3", "--batch_size", "16", "--gen_kwargs", "max_gen_toks=6",
        "--metadata", json.dumps({"fktc_path": str(shared_data / "fktc")}), "--output_path", str(tmp_path), "--log_samples",
    ])
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = read_results(tmp_path)["results"]["belief_monitor_P276"]
    assert r["primary_prob,none"] > r["negative_prob,none"] > 0
    assert "acc_frame_5,none" in r and "acc_frame_6,none" not in r  # P276 has 6 frames
    assert r["monitor,none"] > 0


@pytest.mark.e2e
def test_per_token_route_on_hf_shared_matches_prefix_route_on_hf(prefix_run, model_path):
    pytest.importorskip("belief_tasks.backends.shared")

    def records(res):
        return {s["doc"]["fact_id"]: s["monitor"] for s in res["samples"]["belief_monitor_sample"]}

    prefix, per_token = records(prefix_run), records(_sample_run(model_path, "hf-shared", "per_token"))
    assert prefix.keys() == per_token.keys() and len(prefix) == 3
    for fid, a in prefix.items():
        b = per_token[fid]
        assert (a["route"], b["route"]) == ("prefix", "per_token")
        for key in ("frames", "negatives"):
            assert [x for row in [a["primary"], *a[key]] for x in row] == pytest.approx(
                [x for row in [b["primary"], *b[key]] for x in row], abs=1e-5), (fid, key)
