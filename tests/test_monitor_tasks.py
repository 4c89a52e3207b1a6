"""MONITOR harness glue: YAMLs, options, aggregations over records, and end-to-end runs on the bundled model."""

from __future__ import annotations

import json

import pytest

from belief_tasks.options import KnobError, parse_options
from belief_tasks.scoring import monitor as SC
from belief_tasks.scoring.monitor import MonitorRecord
from belief_tasks.tasks import monitor as T
from belief_tasks.tasks import monitor_subwords as S


def _docs(dataset, **metadata):
    """A MONITOR ``custom_dataset`` function's test docs, handed the knobs parsed as the task parses them."""
    return dataset(parse_options(T.OPTIONS, metadata))["test"]


def test_metric_list_is_the_metric_table(model_path):
    """No YAML lists MONITOR's metrics: the task class wires ``scoring.monitor.METRICS``, in its order."""
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    meta = {"source": "sample", "pretrained": str(model_path), "relations": "P36", "max_facts_per_relation": 1}
    task = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=meta).load(
        ["belief_monitor_sample"]
    )["tasks"]["belief_monitor_sample"]
    wired = [(m["metric"], m["aggregation"].metric, m["higher_is_better"]) for m in task.config.metric_list]
    assert wired == [(k, m, m.higher_is_better) for k, m in SC.METRICS.items()]
    assert list(task.aggregation()) == list(SC.METRICS) and task.higher_is_better() == {
        k: m.higher_is_better for k, m in SC.METRICS.items()
    }
    assert len(SC.METRICS) == 12 + SC.MAX_FRAMES + 5 + 6  # anchors and frame accuracies, R x M accuracies, costs
    assert {k for k, m in SC.METRICS.items() if not m.higher_is_better} == {"monitor", "pfd", "ird", *SC.COST_METRICS}


def test_tasks_are_indexed():
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    names = set(TaskManager(include_path=str(task_yamls_dir()), include_defaults=False).all_tasks)
    assert {"belief_monitor", "belief_monitor_sample", "belief_demo_monitor"} <= names
    assert not {n for n in names if n.startswith("belief_monitor_P")}


def test_belief_monitor_is_fktc_and_takes_the_relations_knob(shared_data, model_path):
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    meta = {"fktc_path": str(shared_data / "fktc"), "pretrained": str(model_path)}
    task = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=meta).load(
        ["belief_monitor"]
    )["tasks"]["belief_monitor"]
    docs = task.test_docs()
    assert len(docs) == 16198 and len(set(docs["relation"])) == 20
    chosen = _docs(T.fktc_dataset, **meta, relations="P264,P37", max_facts_per_relation=4)
    assert sorted(chosen["relation"]) == ["P264"] * 4 + ["P37"] * 4
    p264 = [d for d in chosen if d["relation"] == "P264"][0]
    assert len(json.loads(p264["anchors"])) == 1 + 6 + 5


def test_options_are_validated():
    opts = parse_options(
        T.OPTIONS,
        {
            "monitor_alpha": "0.5,0.25,0.25",
            "only_correct_primary": "true",
            "answer_format": "bare",
            "monitor_route": "PER_TOKEN",
        },
    )
    assert (opts.monitor_route, opts.monitor_alpha, opts.only_correct_primary) == ("per_token", (0.5, 0.25, 0.25), True)
    assert T.answer_format(opts) == "{prompt}"
    assert parse_options(T.OPTIONS, {}).monitor_alpha == (0.33, 0.33, 0.33)
    for knob, bad in (
        ("monitor_route", "beam"),
        ("monitor_alpha", "1,2"),
        ("monitor_alpha", "1,-1,0"),
        ("only_correct_primary", "maybe"),
    ):
        with pytest.raises(KnobError, match=knob):
            parse_options(T.OPTIONS, {knob: bad})
    with pytest.raises(KnobError, match="answer_format"):
        T.answer_format(parse_options(T.OPTIONS, {"answer_format": "no placeholder"}))


def test_no_tokenizer_or_unknown_relation_fails_before_model_time(model_path):
    with pytest.raises(KnobError, match="tokenizer.*pretrained") as err:
        _docs(T.sample_dataset, source="sample")  # e.g. a chat API's model args: nothing to tokenise with
    assert "backends that only generate text, such as chat APIs, cannot run it" in str(err.value)
    with pytest.raises(KnobError, match="P101"):  # an FKTC relation the sample does not have
        _docs(T.fktc_dataset, relations="P101", source="sample", pretrained=str(model_path))
    with pytest.raises(KnobError, match="could not load the tokenizer"):
        _docs(T.sample_dataset, source="sample", model="gpt-4o-mini")


def test_codec_follows_add_bos_token(model_path):
    pretrained = str(model_path)
    assert S.Codec({"pretrained": pretrained}).special == {}  # lm-eval's hf default: the tokenizer's own choice
    assert S.Codec({"pretrained": pretrained, "add_bos_token": "true"}).special == {"add_special_tokens": True}
    assert S.Codec({"pretrained": pretrained, "add_bos_token": False}).special == {"add_special_tokens": False}


def test_sample_docs(model_path):
    docs = _docs(
        T.sample_dataset, source="sample", pretrained=str(model_path), relations="P36", max_facts_per_relation=3
    )
    assert len(docs) == 3 and {d["relation"] for d in docs} == {"P36"}
    anchors = json.loads(docs[0]["anchors"])
    assert [a["kind"] for a in anchors] == ["positive"] + ["frame"] * 7 + ["negative"] * 5
    assert anchors[0]["text"].startswith(f"Question: {docs[0]['object']}. ")
    # belief_monitor on source=sample builds the same docs as belief_monitor_sample
    same = _docs(T.fktc_dataset, source="sample", pretrained=str(model_path), relations="P36", max_facts_per_relation=3)
    assert same.to_list() == docs.to_list()


def _record(rel, primary, frames, negatives, correct, positive_correct=1, **kw):
    return {
        "relation": rel,
        "primary": primary,
        "frames": frames,
        "negatives": negatives,
        "correct": correct,
        "positive_correct": positive_correct,
        "alpha": [0.33, 0.33, 0.33],
        **kw,
    }


RECORDS = [
    # P1: fact A (1 subword) and fact B (2 subwords) of test_monitor_metrics; P2: one fact with PFD = IRD = 0
    _record("P1", [0.8], [[0.6], [0.2]], [[0.4], [0.8], [0.5]], [1, 0]),
    _record("P1", [0.9, 0.5], [[0.5, 0.5], [0.9, 0.1]], [[0.1, 0.5]], [1, 1], positive_correct=0),
    _record("P2", [0.5], [[0.5], [0.5]], [[0.5]], [0, 0]),
]


def test_aggregations_score_each_relation_then_average():
    p1 = 0.41511  # hand-computed in test_monitor_metrics
    assert SC.agg_monitor(RECORDS) == pytest.approx((p1 + 0.0) / 2, abs=1e-5)
    assert SC.agg_pfd(RECORDS) == pytest.approx(((0.4 + 0.2) / 2 + 0) / 2)
    assert SC.agg_primary_prob(RECORDS) == pytest.approx(((0.8 + 0.7) / 2 + 0.5) / 2)
    assert SC.agg_acc_avg(RECORDS) == pytest.approx(((1 + 0.5) / 2 + 0) / 2)
    assert SC.agg_acc_max(RECORDS) == pytest.approx((1 + 0) / 2)
    assert SC.agg_acc_frame_1(RECORDS) == pytest.approx((0.5 + 0) / 2)
    assert SC.agg_acc_positive(RECORDS) == pytest.approx((0.5 + 1) / 2)
    assert SC.METRICS["monitor"].stderr(RECORDS) > 0


def test_only_correct_primary_drops_facts_from_anchor_metrics_only():
    flagged = [dict(r, only_correct_primary=True) for r in RECORDS]
    # P1 keeps fact A only: sqrt(.33 (.4^2 + (.7/3)^2 + .4 * .7/3)) / .8
    fact_a = (0.33 * (0.16 + (0.7 / 3) ** 2 + 0.4 * 0.7 / 3)) ** 0.5 / 0.8
    assert SC.agg_monitor(flagged) == pytest.approx((fact_a + 0.0) / 2)
    assert SC.agg_acc_avg(flagged) == SC.agg_acc_avg(RECORDS)


def test_frame_accuracies_skip_relations_without_the_frame():
    # a 6-frame relation (as P264, P276) beside a 3-frame one: frame 5 is averaged over the first only
    six = _record("P276", [0.5], [[0.5]] * 6, [[0.5]], [0, 1, 0, 1, 0, 1])
    three = _record("P17", [0.5], [[0.5]] * 3, [[0.5]], [1, 1, 0])
    assert SC.agg_acc_frame_5([six, three]) == 1.0
    assert SC.agg_acc_frame_0([six, three]) == pytest.approx((0 + 1) / 2)
    assert SC.agg_acc_avg([six, three]) == pytest.approx((0.5 + 2 / 3) / 2)


def test_fact_quantities_are_memoised_per_run_records_not_fact_ids():
    """The 19 aggregations share one computation of the per-fact quantities per run's records: a second
    run's records with the same fact ids but other anchors get their own numbers."""
    first = SC.agg_pfd(RECORDS)
    moved = [dict(r, frames=[[min(1.0, p + 0.1) for p in f] for f in r["frames"]]) for r in RECORDS]
    # P1: fact A |0.8-0.7|, |0.8-0.3| -> 0.3; fact B frames (0.6, 0.6), (1.0, 0.2) -> (0.2 + 0.2) / 2 = 0.2; P2: 0.1
    assert SC.agg_pfd(moved) == pytest.approx(((0.3 + 0.2) / 2 + 0.1) / 2)
    assert SC.agg_pfd(RECORDS) == first


def test_records_with_different_alphas_are_refused():
    mixed = [RECORDS[0], dict(RECORDS[2], alpha=[1, 0, 0])]
    with pytest.raises(ValueError, match="monitor_alpha"):
        SC.agg_monitor(mixed)
    # a1 = 1 alone: MONITOR = sum PFD / sum probs, per relation: P1 fact A 0.4 / 0.8, P2 0
    assert SC.agg_monitor([dict(r, alpha=[1, 0, 0]) for r in (RECORDS[0], RECORDS[2])]) == pytest.approx((0.5 + 0) / 2)


def _sample_run(model_path, model: str, route: str) -> dict:
    from harness import evaluate

    # belief_monitor on the bundled sample (evaluate's default source)
    return evaluate(
        ["belief_monitor"],
        f"pretrained={model_path},dtype=float32",
        model=model,
        device="cpu",
        metadata={
            "pretrained": str(model_path),
            "relations": "P36",
            "max_facts_per_relation": 3,
            "monitor_route": route,
        },
        gen_kwargs="max_gen_toks=6",
        batch_size=16,
    )


@pytest.fixture(scope="module")
def prefix_run(model_path):
    return _sample_run(model_path, "hf", "prefix")


@pytest.mark.e2e
def test_sample_end_to_end(prefix_run):
    r = prefix_run["results"]["belief_monitor"]
    # the gold object is likelier when the context states it than under a wrong entity or no context
    assert r["primary_prob,none"] > r["frame_prob,none"] > 0
    assert r["primary_prob,none"] > r["negative_prob,none"] > 0
    assert 0 < r["monitor,none"] < float("inf") and r["monitor_stderr,none"] > 0
    assert 0 < r["pfd,none"] < 1 and 0 < r["ird,none"] < 1
    samples = prefix_run["samples"]["belief_monitor"]
    rec = samples[0]["monitor"]
    assert set(rec) == set(MonitorRecord.__annotations__)
    assert rec["relation"] == "P36" and rec["fact_id"] == samples[0]["doc"]["fact_id"]
    assert len(rec["frames"]) == 7 and len(rec["negatives"]) == 5 and len(rec["answers"]) == 7
    assert all(len(a) == len(rec["units"]) for a in [rec["primary"], *rec["frames"], *rec["negatives"]])
    assert "".join(rec["units"]) == " " + rec["object"]
    # recomputable from the logged records
    assert SC.agg_monitor([s["monitor"] for s in samples]) == pytest.approx(r["monitor,none"])


def _cli_run(tmp_path, metadata: dict, model_path) -> dict:
    from harness import read_results, run_cli

    proc = run_cli(
        [
            "--model",
            "hf",
            "--model_args",
            f"pretrained={model_path},dtype=float32",
            "--device",
            "cpu",
            "--tasks",
            "belief_monitor",
            "--batch_size",
            "16",
            "--gen_kwargs",
            "max_gen_toks=6",
            "--metadata",
            json.dumps(metadata),
            "--output_path",
            str(tmp_path / "out"),
            "--log_samples",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return read_results(tmp_path / "out")["results"]["belief_monitor"]


def _report_per_relation(tmp_path) -> tuple[dict, dict, list]:
    """belief-report on the run: Table 4's row, Table 11's rows by relation, the records."""
    import csv

    from belief_tasks.report import build_report

    report = build_report([tmp_path / "out"], tmp_path / "report")
    assert report.mismatched == [] and report.checked >= len(SC.METRICS) - len(SC.PAPER_ACCURACY_METRICS) - 1
    tables = tmp_path / "report" / "tables"
    with (tables / "monitor_table4_belief_monitor.csv").open() as fh:
        t4 = list(csv.DictReader(fh))[0]
    with (tables / "monitor_table11_belief_monitor.csv").open() as fh:
        t11 = {row["relation"]: row for row in csv.DictReader(fh)}
    samples = next((tmp_path / "out").rglob("samples_belief_monitor_*.jsonl")).read_text().splitlines()
    return t4, t11, [json.loads(line)["monitor"] for line in samples]


def _cell(row: dict, suffix: str) -> float:
    """Table 11's value of the one model in ``row``, column ``<model><suffix>``."""
    (value,) = [v for k, v in row.items() if k.endswith(suffix)]
    return float(value)


@pytest.mark.e2e
def test_belief_monitor_on_the_sample_through_the_cli_and_the_report(model_path, tmp_path):
    """`belief-eval` passes --model_args to the task (tokenizer from pretrained=); the report reads the one task."""
    r = _cli_run(tmp_path, {"source": "sample", "relations": "P36,P19", "max_facts_per_relation": 1}, model_path)
    t4, t11, records = _report_per_relation(tmp_path)
    assert sorted(t11) == ["P19", "P36"] and t4["relations"] == "2" and t4["facts"] == "2"
    assert float(t4["monitor"]) == pytest.approx(r["monitor,none"], rel=1e-12)
    per_relation = {rel: _cell(row, " MONITOR") for rel, row in t11.items()}
    for rel, v in per_relation.items():  # each relation alone, with the task's aggregation
        assert v == pytest.approx(SC.agg_monitor([x for x in records if x["relation"] == rel]), rel=1e-12)
    assert sum(per_relation.values()) / 2 == pytest.approx(r["monitor,none"], rel=1e-12)  # Table 4 = mean of Table 11
    assert _cell(t11["P36"], " avg acc") == pytest.approx(
        SC.agg_acc_avg([x for x in records if x["relation"] == "P36"])
    )


@pytest.mark.e2e
def test_fktc_relations_with_six_and_seven_frames_in_one_run(shared_data, model_path, tmp_path):
    r = _cli_run(
        tmp_path,
        {"fktc_path": str(shared_data / "fktc"), "relations": "P17,P276", "max_facts_per_relation": 2},
        model_path,
    )
    assert r["primary_prob,none"] > r["negative_prob,none"] > 0 and r["monitor,none"] > 0
    t4, t11, records = _report_per_relation(tmp_path)
    assert sorted(t11) == ["P17", "P276"] and t4["facts"] == "4"
    p17 = [x for x in records if x["relation"] == "P17"]
    assert {len(x["frame_ids"]) for x in records} == {6, 7}
    # frame 6 (the 7th) exists for P17 only: its accuracy is P17's, not halved by P276
    assert r["acc_frame_6,none"] == pytest.approx(sum(x["correct"][6] for x in p17) / 2)
    assert r["acc_frame_5,none"] == pytest.approx(
        (sum(x["correct"][5] for x in p17) / 2 + sum(x["correct"][5] for x in records if x["relation"] == "P276") / 2)
        / 2
    )


@pytest.mark.e2e
def test_per_token_route_on_hf_shared_matches_prefix_route_on_hf(prefix_run, model_path):
    pytest.importorskip("belief_tasks.backends.shared")

    def records(res):
        return {s["doc"]["fact_id"]: s["monitor"] for s in res["samples"]["belief_monitor"]}

    prefix, per_token = records(prefix_run), records(_sample_run(model_path, "hf-shared", "per_token"))
    assert prefix.keys() == per_token.keys() and len(prefix) == 3
    for fid, a in prefix.items():
        b = per_token[fid]
        assert (a["route"], b["route"]) == ("prefix", "per_token")
        for key in ("frames", "negatives"):
            assert [x for row in [a["primary"], *a[key]] for x in row] == pytest.approx(
                [x for row in [b["primary"], *b[key]] for x in row], abs=1e-5
            ), (fid, key)
