"""MONITOR's paper accuracy (section 4.3: R x M frame x negative-interference greedy answers per fact),
the ``monitor_accuracy`` knob, and the request / token counts each record carries (Table 8's comparison)."""

from __future__ import annotations

import json

import pytest

from belief_tasks.data.fktc import load_fktc_folder
from belief_tasks.metrics import monitor as M
from belief_tasks.options import KnobError, parse_options
from belief_tasks.prompts import monitor as P
from belief_tasks.scoring import monitor as SC
from belief_tasks.tasks import monitor as T
from belief_tasks.tasks import monitor_subwords as S

# Hand-written rows in FKTC's layout (line 1: the relation's QA prompts; then subject, object, 5 negatives).
# P17 has 7 frames as 18 of FKTC's relations do; P264 has 6, as P264 and P276 do.
P17_FRAMES = [
    "Which country is [X] located in?",
    "In which country is [X]?",
    "[X] belongs to which country?",
    "What country contains [X]?",
    "Where, by country, is [X]?",
    "Name the country of [X].",
    "Which nation is [X] part of?",
]
P264_FRAMES = [
    "What is the record label for [X]?",
    "Which label signed [X]?",
    "[X] records for which label?",
    "Who releases the music of [X]?",
    "Name the music label of [X].",
    "Which company represents [X]?",
]
P17_ROW = {
    "subject": "Lake Brienz",
    "object": "Switzerland",
    "taxonomy": ["France", "Italy", "Austria", "Spain", "Norway"],
}
P264_ROW = {
    "subject": "The Example Band",
    "object": "Sub Pop",
    "taxonomy": ["Matador", "Merge", "Domino", "Warp", "XL"],
}


@pytest.fixture
def fktc_folder(tmp_path):
    for name, frames, row in (
        ("P17-subclass.json", P17_FRAMES, P17_ROW),
        ("P264-subclass.json", P264_FRAMES, P264_ROW),
    ):
        (tmp_path / name).write_text(json.dumps({"relations": frames}) + "\n" + json.dumps(row) + "\n")
    return tmp_path


@pytest.mark.parametrize("rid, frames, row", [("P17", P17_FRAMES, P17_ROW), ("P264", P264_FRAMES, P264_ROW)])
def test_r_x_m_prompts_of_six_and_seven_frame_relations(fktc_folder, rid, frames, row):
    fs = load_fktc_folder(fktc_folder)
    (fact,) = [f for f in fs if f.relation == rid]
    prompts = P.interference_prompts(fact, fs.relations[rid])
    assert len(prompts) == len(frames) * 5  # R x M: 35 for P17, 30 for P264
    # frame-major: frame j, then each negative m, "{negative}. " + frame j's question, inside the answer format
    for k, q in enumerate(prompts):
        j, m = divmod(k, 5)
        question = frames[j].replace("[X]", row["subject"])
        assert (q.frame, q.negative) == (f"{rid}_f{j}", m)
        assert q.text == f"Question: {row['taxonomy'][m]}. {question}\nAnswer:"
    bare = P.interference_prompts(fact, fs.relations[rid], P.answer_format("bare"))
    assert bare[-1].text == f"{row['taxonomy'][4]}. {frames[-1].replace('[X]', row['subject'])}"
    # the first frame's row are exactly the negative anchors' prompts (template 5 on the base question)
    negatives = [a.text for a in P.anchor_prompts(fact, fs.relations[rid]) if a.kind == "negative"]
    assert [q.text for q in prompts[:5]] == negatives


def test_docs_carry_the_grid_only_with_paper(fktc_folder, model_path):
    meta = {"fktc_path": str(fktc_folder), "pretrained": str(model_path)}
    paper = {
        d["relation"]: d
        for d in T.fktc_dataset(parse_options(T.OPTIONS, {**meta, "monitor_accuracy": "paper"}))["test"]
    }
    grid = json.loads(paper["P264"]["interference"])
    assert len(grid) == 30 and grid[7] == {
        "frame": "P264_f1",
        "negative": 2,
        "text": "Question: Domino. Which label signed The Example Band?\nAnswer:",
    }
    frames = T.fktc_dataset(parse_options(T.OPTIONS, meta))["test"]
    assert "interference" not in frames.to_list()[0]  # the default docs are what they were


def test_knob_is_validated():
    assert parse_options(T.OPTIONS, {}).monitor_accuracy == "frames"
    assert parse_options(T.OPTIONS, {"monitor_accuracy": "PAPER"}).monitor_accuracy == "paper"
    with pytest.raises(KnobError, match="monitor_accuracy"):
        parse_options(T.OPTIONS, {"monitor_accuracy": "all"})
    with pytest.raises(KnobError, match="only_correct_primary"):
        T.check_options(parse_options(T.OPTIONS, {"monitor_accuracy": "none", "only_correct_primary": True}))


# --------------------------------------------------------------------------- accuracies by hand

# P1: 2 facts, R = 2 frames x M = 3 negatives; P2: 1 fact. Per combination, the share of facts answered right:
# P1 [[1, 1, .5], [.5, .5, 1]] -> avg 4.5/6 = .75, max 1, min .5;  P2 [[0, 1, 0], [1, 1, 0]] -> avg .5, max 1, min 0
P1_GRIDS = [[[1, 1, 1], [0, 1, 1]], [[1, 1, 0], [1, 0, 1]]]
P2_GRID = [[0, 1, 0], [1, 1, 0]]


def test_combination_accuracies_by_hand():
    assert M.combination_accuracies(P1_GRIDS).tolist() == [[1, 1, 0.5], [0.5, 0.5, 1]]
    assert M.accuracy_summary(P1_GRIDS) == pytest.approx({"avg": 0.75, "max": 1.0, "min": 0.5})
    rels, grids = ["P1", "P1", "P2"], [*P1_GRIDS, P2_GRID]
    assert M.accuracy_over_relations(rels, grids, "avg") == pytest.approx((0.75 + 0.5) / 2)
    assert M.accuracy_over_relations(rels, grids, "max") == pytest.approx(1.0)
    assert M.accuracy_over_relations(rels, grids, "min") == pytest.approx((0.5 + 0.0) / 2)
    assert M.accuracy_across_relations(rels, grids, "max") == pytest.approx(0.75)
    assert M.accuracy_across_relations(rels, grids, "min") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same prompt combinations"):
        M.combination_accuracies([[[1, 0, 1]], [[1, 0]]])


def _record(rel, grid, correct, mode="paper", cost=None):
    return {
        "relation": rel,
        "primary": [0.5],
        "frames": [[0.5]] * len(correct),
        "negatives": [[0.5]] * 3,
        "correct": correct,
        "positive_correct": 1,
        "interference_correct": grid,
        "alpha": [0.33] * 3,
        "accuracy": mode,
        "frame_ids": [f"f{j}" for j in range(len(correct))],
        "cost": cost,
    }


def test_paper_aggregations_by_hand():
    records = [_record("P1", P1_GRIDS[0], [1, 0]), _record("P1", P1_GRIDS[1], [1, 1]), _record("P2", P2_GRID, [0, 0])]
    assert SC.agg_acc_paper_avg(records) == pytest.approx(0.625)
    assert SC.agg_acc_paper_max(records) == pytest.approx(1.0)
    assert SC.agg_acc_paper_min(records) == pytest.approx(0.25)
    assert SC.agg_acc_paper_relation_max(records) == pytest.approx(0.75)
    assert SC.agg_acc_paper_relation_min(records) == pytest.approx(0.5)
    assert SC.agg_acc_avg(records) == pytest.approx((0.75 + 0.0) / 2)  # the frame-only accuracy stays its own number
    assert SC.METRICS["acc_paper_avg"].stderr(records) > 0
    # records of a frames run have no grid: the paper accuracies are undefined there, not zero
    frames_only = [dict(r, interference_correct=[], accuracy="frames") for r in records]
    assert SC.agg_acc_paper_avg(frames_only) != SC.agg_acc_paper_avg(frames_only)  # NaN


def test_the_metrics_of_a_record_follow_the_mode():
    names = {mode: set(SC.metrics_of(_record("P1", [], [1, 0], mode))) for mode in ("paper", "frames", "none")}
    assert set(SC.PAPER_ACCURACY_METRICS) <= names["paper"] and not set(SC.PAPER_ACCURACY_METRICS) & names["frames"]
    assert not {"acc_avg", "acc_positive", "acc_frame_0"} & names["none"]
    assert {"monitor", "pfd", "ird", *SC.COST_METRICS} <= names["none"]
    assert "acc_frame_2" not in names["frames"]  # two frames: no third frame's accuracy


def test_cost_totals():
    cost = {
        "anchors": {"requests": 13, "tokens": 200},
        "answers": {"requests": 8, "tokens": 150},
        "interference": {"requests": 35, "tokens": 900},
    }
    records = [_record("P1", P1_GRIDS[0], [1, 0], cost=cost)] * 2
    assert SC.agg_cost_anchor_requests(records) == 26 and SC.agg_cost_paper_tokens(records) == 1800
    assert SC.METRICS["cost_anchor_requests"].stderr_function is None
    assert SC.agg_cost_anchor_tokens([dict(r, cost=None) for r in records]) != SC.agg_cost_anchor_tokens(
        []
    )  # NaN != NaN


def test_a_budgeted_run_of_every_fact_estimates_the_plain_values():
    """The budget's estimators (``scoring.monitor.budget_units``: the R x M grid and the cost counts) give the
    plain aggregations when every fact is drawn, and a cost total the sum over facts."""
    from belief_tasks.families import MONITOR
    from belief_tasks.scoring.wiring import Aggregation

    cost = {
        "anchors": {"requests": 13, "tokens": 200},
        "answers": {"requests": 8, "tokens": 150},
        "interference": {"requests": 35, "tokens": 900},
    }
    grids = {"P1": P1_GRIDS, "P2": [P2_GRID, [[1, 1, 1], [0, 0, 1]]]}
    records = [
        dict(_record(rel, grid, [1, 0], cost=cost), fact_id=f"{rel}_{i}", budget=1.0, population=2, drawn=2)
        for i in range(2)
        for rel, grid in ((rel, grids[rel][i]) for rel in grids)
    ]
    for name in (*SC.PAPER_ACCURACY_METRICS, "acc_avg", "cost_paper_tokens"):
        agg = Aggregation(name, SC.METRICS[name], MONITOR.budgeted)
        assert agg(records) == pytest.approx(SC.METRICS[name].aggregation(records), rel=1e-12), name
    assert Aggregation("cost_anchor_requests", SC.METRICS["cost_anchor_requests"], MONITOR.budgeted)(records) == 52


# --------------------------------------------------------------------------- requests and records (real tokenizer)


def _doc_and_plan(fktc_folder, model_path, mode):
    meta = {"fktc_path": str(fktc_folder), "pretrained": str(model_path), "relations": "P264", "monitor_accuracy": mode}
    doc = T.fktc_dataset(parse_options(T.OPTIONS, meta))["test"].to_list()[0]
    codec = S.Codec(meta)
    return doc, S.plan(doc, codec), codec, parse_options(T.OPTIONS, meta)


def test_requests_and_record_of_a_paper_fact(fktc_folder, model_path):
    doc, pl, codec, opts = _doc_and_plan(fktc_folder, model_path, "paper")
    reqs = T.requests_of(pl, doc, opts, {"until": ["\n\n"]})
    n_score = S.n_scoring_requests(pl, "prefix")
    grid = json.loads(doc["interference"])
    assert len(reqs) == n_score + 7 + 30  # anchors, then positive + 6 frames, then 6 x 5
    assert [t for t, _ in reqs[:n_score]] == ["loglikelihood"] * n_score
    assert [args[0] for _, args in reqs[n_score + 7 :]] == [q["text"] for q in grid]
    # answers: right under frame 1 behind negatives 0 and 3 only (the first line counts)
    right = {(1, 0), (1, 3)}
    grid_out = [" Sub Pop\nmore" if (int(q["frame"][-1]), q["negative"]) in right else " Domino" for q in grid]
    results = [(-0.5, False)] * n_score + [" Sub Pop"] * 7 + grid_out
    rec = T.make_record(doc, results, opts, pl, codec)
    assert rec["interference_correct"] == [[int((j, m) in right) for m in range(5)] for j in range(6)]
    assert rec["interference_answers"][1][0] == "Sub Pop" and rec["correct"] == [1] * 6
    # requests and tokens, counted independently with the tokenizer: the anchors' (context + continuation)
    # strings, the greedy prompts plus the returned text
    tok = codec.tokenizer
    anchor_tokens = sum(len(tok(ctx + cont)["input_ids"]) for t, (ctx, cont) in reqs[:n_score])
    prompts = [args[0] for _, args in reqs[n_score + 7 :]]
    grid_tokens = sum(len(tok(p)["input_ids"]) for p in prompts) + sum(
        len(tok(g, add_special_tokens=False)["input_ids"]) for g in grid_out
    )
    assert rec["cost"]["anchors"] == {"requests": n_score, "tokens": anchor_tokens}
    assert rec["cost"]["interference"] == {"requests": 30, "tokens": grid_tokens}
    assert rec["cost"]["answers"]["requests"] == 7


def test_none_asks_for_anchors_only(fktc_folder, model_path):
    doc, pl, codec, opts = _doc_and_plan(fktc_folder, model_path, "none")
    reqs = T.requests_of(pl, doc, opts, {})
    assert {t for t, _ in reqs} == {"loglikelihood"}
    rec = T.make_record(doc, [(-0.1, True)] * len(reqs), opts, pl, codec)
    assert (rec["positive_answer"], rec["answers"], rec["interference_correct"]) == (None, [], [])
    assert rec["cost"]["answers"] == rec["cost"]["interference"] == {"requests": 0, "tokens": 0}
    assert rec["cost"]["anchors"]["requests"] == len(reqs) == 12 * len(rec["units"])


# --------------------------------------------------------------------------- whole runs


def _paper_run(model_path, model: str) -> dict:
    from harness import evaluate

    return evaluate(
        ["belief_monitor"],
        f"pretrained={model_path},dtype=float32",
        model=model,
        device="cpu",
        metadata={
            "pretrained": str(model_path),
            "relations": "P36",
            "max_facts_per_relation": 2,
            "monitor_accuracy": "paper",
            "monitor_route": "per_token" if model == "hf-shared" else "prefix",
        },
        gen_kwargs="max_gen_toks=8",
        batch_size=16,
    )


@pytest.mark.e2e
def test_paper_accuracy_run_and_hf_shared_gives_the_same_greedy_answers(tiny_model_path):
    """The R x M generations on stock hf and on the prefix-sharing backend: the same greedy answers (agreement, so a
    tiny random model with the bundled tokenizer serves)."""
    pytest.importorskip("belief_tasks.backends.shared")
    runs = {m: _paper_run(tiny_model_path, m) for m in ("hf", "hf-shared")}
    recs = {m: {s["doc"]["fact_id"]: s["monitor"] for s in r["samples"]["belief_monitor"]} for m, r in runs.items()}
    assert recs["hf"].keys() == recs["hf-shared"].keys() and len(recs["hf"]) == 2
    for fid, a in recs["hf"].items():
        b = recs["hf-shared"][fid]
        assert len(a["interference_answers"]) == 7 and {len(row) for row in a["interference_answers"]} == {5}
        assert len({x for row in a["interference_answers"] for x in row} - {""}) > 1  # real, varied answers
        assert (a["positive_answer"], a["answers"], a["interference_answers"]) == (
            b["positive_answer"],
            b["answers"],
            b["interference_answers"],
        ), fid
    res, records = runs["hf"]["results"]["belief_monitor"], list(recs["hf"].values())
    assert res["acc_paper_avg,none"] == pytest.approx(SC.agg_acc_paper_avg(records))
    assert res["acc_paper_avg,none"] == pytest.approx(
        sum(c for r in records for row in r["interference_correct"] for c in row) / 70
    )  # one relation: 2 x 35
    assert res["cost_paper_requests,none"] == 70 and res["cost_answer_requests,none"] == 16
    assert res["cost_anchor_requests,none"] == sum(r["cost"]["anchors"]["requests"] for r in records)
    assert res["cost_paper_tokens,none"] > res["cost_anchor_tokens,none"] > 0
