"""Agreement between probes (report section and metrics), against values computed by hand."""

from __future__ import annotations

import csv
import math

import pytest

from belief_tasks.families import FAMILIES
from belief_tasks.metrics.agreement import agreement_table, cohen_kappa, kappa_interval


def test_kappa_by_hand():
    # p_o = 4/6; p_a = p_b = 1/2 -> p_e = 1/2; kappa = (2/3 - 1/2) / (1/2) = 1/3
    assert cohen_kappa([1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1]) == pytest.approx(1 / 3)
    # p_o = 3/4; p_a = 3/4, p_b = 1/2 -> p_e = 3/8 + 1/8 = 1/2; kappa = 1/2
    assert cohen_kappa([1, 1, 1, 0], [1, 1, 0, 0]) == pytest.approx(0.5)
    # perfect disagreement with p_a = p_b = 1/2: p_o = 0, p_e = 1/2 -> -1
    assert cohen_kappa([1, 0], [0, 1]) == pytest.approx(-1.0)
    assert math.isnan(cohen_kappa([1, 1, 1], [1, 1, 1]))  # both constant: undefined
    assert math.isnan(cohen_kappa([], []))
    with pytest.raises(ValueError):
        cohen_kappa([1, 0], [1])


def test_agreement_table_by_hand():
    t = agreement_table([1, 1, 0, 0, 1, 0], [1, 0, 0, 0, 1, 1])
    assert t == {
        "agreement": pytest.approx(4 / 6),
        "both": pytest.approx(2 / 6),
        "only_a": pytest.approx(1 / 6),
        "only_b": pytest.approx(1 / 6),
        "neither": pytest.approx(2 / 6),
        "n": 6,
    }


def test_bootstrap_interval_is_seeded_and_brackets_kappa():
    a = [1, 1, 0, 0, 1, 0, 1, 1, 0, 1] * 4
    b = [1, 0, 0, 0, 1, 1, 1, 1, 0, 0] * 4
    lo, hi = kappa_interval(a, b, iters=500, seed=3)
    assert (lo, hi) == kappa_interval(a, b, iters=500, seed=3)
    assert lo < cohen_kappa(a, b) < hi and -1 <= lo and hi <= 1
    assert kappa_interval([1, 1], [1, 1]) == pytest.approx((math.nan, math.nan), nan_ok=True)


def _icl(fact, templates, subjects, correct):
    """A per-pair BELIEF-ICL record: the (template x subject) grid's correctness, templates first."""
    return {
        "fact_id": fact,
        "relation": "P36",
        "templates": templates,
        "subjects": subjects,
        "answers": ["x"] * len(correct),
        "correct": correct,
    }


def test_known_rules_per_family():
    icl = [
        _icl("f1", ["t0", "t1", "t2"], ["a", "b"], [False, True, True, True, False, False]),
        _icl("f2", ["t0", "t1"], ["a"], [True, False]),
    ]
    # f1: t0 right (one of two subject forms), t1 right, t2 wrong -> 2 of 3: known; f2: 1 of 2 is not most
    assert FAMILIES["belief_icl"].known(icl) == {"f1": True, "f2": False}
    bear = [
        {"fact_id": "f1", "template_id": f"t{i}", "ll": ll, "gold": [0]}
        for i, ll in enumerate(([-1.0, -2.0], [-1.0, -3.0], [-4.0, -3.0]))
    ]  # gold first under t0 and t1, not t2
    assert FAMILIES["bear"].known(bear) == {"f1": True}
    iclke = [
        {"fact_id": "f1", "logprobs": [-1.0, -0.5], "gold_index": 1},
        {"fact_id": "f2", "logprobs": [-1.0, -3.0], "gold_index": 1},
    ]
    assert FAMILIES["iclke"].known(iclke) == {"f1": True, "f2": False}
    assert FAMILIES["monitor"].known(
        [{"fact_id": "f1", "positive_correct": 1}, {"fact_id": "f2", "positive_correct": 0}]
    ) == {"f1": True, "f2": False}
    mlm = [
        {"fact_id": "f1", "template_id": "t0", "gold_rank": 1},
        {"fact_id": "f1", "template_id": "t1", "gold_rank": 2},
    ]
    assert FAMILIES["belief_mlm"].known(mlm) == {"f1": False}


def test_report_section_on_synthetic_runs(tmp_path):
    from test_report_synthetic import monitor_record, write_run

    from belief_tasks.report import build_report

    # MONITOR and BEAR on the same four sample facts
    monitor = []
    for f, k in (("P36_001", 1), ("P36_002", 1), ("P36_003", 0), ("P36_004", 0)):
        rec = monitor_record("P36", f, [0.5], [[0.5]], [[0.1]], [k])
        monitor.append({**rec, "positive_correct": k})
    bear = [
        {
            "fact_id": f,
            "relation": "P36",
            "template_id": "t0",
            "template_index": 0,
            "cardinality": "1:1",
            "domains": [],
            "ll": [-1.0, -2.0] if k else [-2.0, -1.0],
            "gold": [0],
        }
        for f, k in (("P36_001", 1), ("P36_002", 0), ("P36_003", 0), ("P36_004", 1))
    ]
    write_run(
        tmp_path / "runs",
        "m",
        {"belief_monitor_sample": monitor, "belief_bear": bear},
        {"belief_monitor_sample": {}, "belief_bear": {}},
        metadata={"belief_monitor_sample": {"dataset": "sample"}, "belief_bear": {"dataset": "sample"}},
    )
    report = build_report([tmp_path / "runs"], tmp_path / "report")
    section = next(s for s in report.sections if s.title == "Agreement between probes")
    # p_o = 2/4, p_a = p_b = 1/2 -> kappa 0
    assert section.summary == ["m: probes agree on 50% of shared facts (mean κ 0.00, 1 probe pair)"]
    with (tmp_path / "report" / "tables" / "agreement_facts_m.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["belief_bear fact_id"], r["belief_bear"], r["belief_monitor_sample"]) for r in rows] == [
        ("P36_001", "known", "known"),
        ("P36_002", "not known", "known"),
        ("P36_003", "not known", "not known"),
        ("P36_004", "known", "not known"),
    ]
    card = (tmp_path / "report" / "cards" / "m.md").read_text()
    assert "probes agree on 50% of shared facts" in card


def test_probes_on_different_datasets_without_keys_are_not_joined(tmp_path):
    from test_report_synthetic import write_run

    from belief_tasks.report import build_report

    bear = [
        {
            "fact_id": "P36_1",
            "relation": "P36",
            "template_id": "t0",
            "template_index": 0,
            "cardinality": "1:1",
            "domains": [],
            "ll": [-1.0, -2.0],
            "gold": [0],
        }
    ]
    iclke = [{"fact_id": "P36_1", "relation": "P36", "logprobs": [-1.0, -2.0], "gold_index": 0}]
    write_run(
        tmp_path / "runs",
        "m",
        {"belief_bear": bear, "belief_iclke_bear": iclke},
        {"belief_bear": {}, "belief_iclke_bear": {}},
        metadata={"belief_bear": {"dataset": "bear"}, "belief_iclke_bear": {"dataset": "bear_big"}},
    )
    report = build_report([tmp_path / "runs"], tmp_path / "report")
    section = next(s for s in report.sections if s.title == "Agreement between probes")
    assert section.summary == []  # the same id, but BEAR's and BEAR-big's instance P36_1 are different facts
    assert (
        "- not joined: belief_bear (`bear`) and belief_iclke_bear (`bear_big`): belief_bear, belief_iclke_bear "
        "logged no fact keys"
    ) in section.markdown


def _key(rid, label, sid=None, objects=("x",), oids=()):
    from belief_tasks.facts.schema import FactKey, fold_label

    return FactKey(rid, fold_label(label), sid, (fold_label(label),), tuple(objects), tuple(oids)).as_record()


#: BEAR (ids), BEAR-big (ids; Australia -> Sydney disagrees with BEAR by id), FKTC (labels only)
BEAR_FACTS = {
    "b1": ("France", "Q142", "Paris", "Q90", True),
    "b2": ("Germany", "Q183", "Berlin", "Q64", True),
    "b3": ("Spain", "Q29", "Madrid", "Q2807", False),
    "b4": ("Italy", "Q38", "Rome", "Q220", False),
    "b5": ("Australia", "Q408", "Canberra", "Q3114", True),
}
BIG_FACTS = {
    "g1": ("France", "Q142", "Paris", "Q90", True),
    "g2": ("Germany", "Q183", "Berlin", "Q64", True),
    "g3": ("Spain", "Q29", "Madrid", "Q2807", False),
    "g4": ("Italy", "Q38", "Rome", "Q220", True),
    "g5": ("Australia", "Q408", "Sydney", "Q3130", True),
    "g6": ("Peru", "Q419", "Lima", "Q2868", False),
}
FKTC_FACTS = {
    "f1": ("France", "Paris", True),
    "f2": ("Germany", "Berlin", True),
    "f3": ("Spain", "Madrid", False),
    "f4": ("Australia", "Sydney", False),
}


def _cross_dataset_run(root):
    from test_report_synthetic import monitor_record, write_run

    bear = [
        {
            "fact_id": f,
            "relation": "P36",
            "template_id": "t0",
            "template_index": 0,
            "cardinality": "1:1",
            "domains": [],
            "ll": [-1.0, -2.0] if k else [-2.0, -1.0],
            "gold": [0],
            "fact_key": _key("P36", s, sid, [o], [oid]),
        }
        for f, (s, sid, o, oid, k) in BEAR_FACTS.items()
    ]
    iclke = [
        {
            "fact_id": f,
            "relation": "P36",
            "logprobs": [-1.0, -2.0] if k else [-2.0, -1.0],
            "gold_index": 0,
            "fact_key": _key("P36", s, sid, [o], [oid]),
        }
        for f, (s, sid, o, oid, k) in BIG_FACTS.items()
    ]
    monitor = [
        {
            **monitor_record("P36", f, [0.5], [[0.5]], [[0.1]], [int(k)]),
            "positive_correct": int(k),
            "fact_key": _key("P36", s, None, [o]),
        }
        for f, (s, o, k) in FKTC_FACTS.items()
    ]
    write_run(
        root,
        "m",
        {"belief_bear": bear, "belief_iclke_bear": iclke, "belief_monitor": monitor},
        {"belief_bear": {}, "belief_iclke_bear": {}, "belief_monitor": {}},
        metadata={
            "belief_bear": {"dataset": "bear"},
            "belief_iclke_bear": {"dataset": "bear_big"},
            "belief_monitor": {"dataset": "fktc"},
        },
    )


def test_probes_of_different_datasets_join_on_the_fact_key(tmp_path):
    from belief_tasks.report import build_report

    _cross_dataset_run(tmp_path / "runs")
    report = build_report([tmp_path / "runs"], tmp_path / "report")
    section = next(s for s in report.sections if s.title == "Agreement between probes")
    with (tmp_path / "report" / "tables" / "agreement_pairs_m.csv").open() as fh:
        pairs = {(r["probe_a"], r["probe_b"]): r for r in csv.DictReader(fh)}
    bb = pairs[("belief_bear", "belief_iclke_bear")]
    # b1..b4 = g1..g4 by id; Australia: Canberra (Q3114) vs Sydney (Q3130), a conflict
    # known [1,1,0,0] vs [1,1,0,1]: p_o 3/4, p_a 1/2, p_b 3/4 -> p_e 1/2, κ 1/2
    assert (bb["n"], bb["id"], bb["label + object"], bb["conflicts"], bb["joined_by"]) == ("4", "4", "0", "1", "id 4")
    assert float(bb["kappa"]) == pytest.approx(0.5)
    assert (float(bb["known_a"]), float(bb["known_b"])) == (0.5, 0.75)  # κ's margins: 2 of 4, 3 of 4 known
    bm = pairs[("belief_bear", "belief_monitor")]
    # France, Germany, Spain by label + object; Australia: Canberra vs Sydney; [1,1,0] vs [1,1,0]: κ 1
    assert (bm["n"], bm["label + object"], bm["conflicts"], float(bm["kappa"])) == ("3", "3", "1", 1.0)
    im = pairs[("belief_iclke_bear", "belief_monitor")]
    # g1,g2,g3,g5 = f1,f2,f3,f4 (Sydney agrees); [1,1,0,1] vs [1,1,0,0]: p_o 3/4, p_e 1/2, κ 1/2
    assert (im["n"], im["label + object"], im["conflicts"], float(im["kappa"])) == ("4", "4", "0", 0.5)
    assert "| belief_bear | belief_iclke_bear | bear / bear_big | 4 | id 4 | 1 | 0.50 [" in section.markdown
    assert "| A knows | B knows | Agreement |" in section.markdown
    assert "] | 0.500 | 0.750 | 0.750 | 0.500 | 0.000 | 0.250 | 0.250 |" in section.markdown  # margins, p_o, cells
    with (tmp_path / "report" / "tables" / "agreement_facts_m.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    tasks = ("belief_bear", "belief_iclke_bear", "belief_monitor")
    cells = lambda key: [[(r[f"{t} fact_id"], r[t]) for t in tasks] for r in rows if r["fact_key"] == key]  # noqa: E731
    # Australia: two facts, one key: BEAR's (Canberra) conflicts with both; BEAR-big's and FKTC's (Sydney) joined
    assert cells("P36|australia") == [
        [("", "not probed"), ("g5", "known"), ("f4", "not known")],
        [("b5", "known"), ("", "not probed"), ("", "not probed")],
    ]
    assert cells("P36|france") == [[("b1", "known"), ("g1", "known"), ("f1", "known")]]
    assert cells("P36|peru") == [[("", "not probed"), ("g6", "not known"), ("", "not probed")]]
    assert len(rows) == 7 and [r["relation"] for r in rows] == ["P36"] * 7
    with (tmp_path / "report" / "tables" / "agreement_conflicts_m.csv").open() as fh:
        conflicts = [
            (r["fact_a"], r["fact_b"], r["subject_by"], r["objects_a"], r["objects_b"]) for r in csv.DictReader(fh)
        ]
    assert conflicts == [("b5", "g5", "id", "Canberra", "Sydney"), ("b5", "f4", "label", "Canberra", "Sydney")]


# ---------------------------------------------------------------- knowledge over training


def _bear_run(tmp_path, folder, model_args, correct):
    from test_report_synthetic import write_run

    recs = [
        {
            "fact_id": f"P36_{i}",
            "relation": "P36",
            "template_id": "t0",
            "template_index": 0,
            "cardinality": "1:1",
            "domains": [],
            "scoring": "statement",
            "reduction": "sum",
            "gold": [0],
            "ll": [-1.0, -2.0] if c else [-2.0, -1.0],
            "n_tokens": None,
            "pred": 0 if c else 1,
            "rank": 0 if c else 1,
            "correct": int(c),
        }
        for i, c in enumerate(correct)
    ]
    path = write_run(tmp_path / "runs", folder, {"belief_bear": recs}, {"belief_bear": {}})
    import json

    results = next(path.glob("results_*.json"))
    data = json.loads(results.read_text())
    data["model_args"] = model_args
    results.write_text(json.dumps(data))


def test_checkpoints_from_revision_folder_name_and_override(tmp_path):
    from belief_tasks.report.base import Context
    from belief_tasks.report.loading import load_runs
    from belief_tasks.report.output import ReportWriter
    from belief_tasks.report.training import checkpoint, training_runs

    _bear_run(tmp_path, "a", "pretrained=EleutherAI/pythia-160m,revision=step1000", [1, 0, 0, 0])
    _bear_run(tmp_path, "b", "pretrained=EleutherAI/pythia-160m,revision=step3000", [1, 1, 0, 0])
    _bear_run(tmp_path, "c", "pretrained=/ckpt/run7/checkpoint-500", [1, 1, 1, 0])
    _bear_run(tmp_path, "d", "pretrained=EleutherAI/pythia-410m,revision=step1000", [1, 1, 1, 1])
    runs = {r.name: r for r in load_runs([tmp_path / "runs"])}
    assert checkpoint(runs["a"]).step == 1000 and checkpoint(runs["b"]).step == 3000
    assert checkpoint(runs["a"]).series == checkpoint(runs["b"]).series != checkpoint(runs["d"]).series
    assert checkpoint(runs["c"]).step == 500
    ctx = Context(list(runs.values()), ReportWriter(tmp_path / "rep"))
    found = training_runs(ctx)
    assert [[step for step, _ in pts] for pts in found.values()] == [[1000.0, 3000.0]]  # 160m only: 410m has one
    # --x: the model size as x puts 160m and 410m (same revision) on one curve
    by_size = training_runs(ctx, r"pythia-(\d+)m")
    assert [sorted(step for step, _ in pts) for pts in by_size.values()] == [
        [160.0, 410.0]
    ]  # revision step1000 of both sizes


def test_training_section_tables_the_recomputed_headline(tmp_path):
    from belief_tasks.report import build_report

    _bear_run(tmp_path, "a", "pretrained=m,revision=step1000", [1, 0, 0, 0])
    _bear_run(tmp_path, "b", "pretrained=m,revision=step3000", [1, 1, 0, 0])
    report = build_report([tmp_path / "runs"], tmp_path / "rep")
    assert any(s.title == "Knowledge over training" for s in report.sections)
    with next((tmp_path / "rep" / "tables").glob("training_0_*.csv")).open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(float(r["step"]), r["task"], r["metric"], float(r["value"])) for r in rows] == [
        (1000.0, "belief_bear", "bear", 0.25),
        (3000.0, "belief_bear", "bear", 0.5),
    ]
