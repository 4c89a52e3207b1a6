"""belief-report on small hand-written lm-eval output folders: tables against hand-computed values.

Each folder is laid out as lm-eval 0.4.13 writes it (``<output_path>/<model>/results_<date>.json``
plus ``samples_<task>_<date>.jsonl``), with records shaped as our tasks' ``process_results``
return them. The results JSON holds hand-computed values, so the report's own check
(recomputed == harness) is exercised too.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from belief_tasks.families import metric_table
from belief_tasks.report import build_report
from belief_tasks.report.cli import main as report_main
from belief_tasks.report.loading import ReportInputError, load_runs

DATE = "2026-01-02T03-04-05.000001"
FAMILY_OF_PROBE = (
    ("belief_mp_", "belief_icl"),
    ("belief_qa_", "belief_icl"),
    ("belief_mlm_", "belief_mlm"),
    ("belief_bear", "bear"),
    ("belief_iclke", "iclke"),
    ("belief_eiclke", "iclke"),
    ("belief_monitor", "monitor"),
)


def task_metrics(task: str) -> list[str]:
    """The metric names of ``task``'s YAML: its family's table (the encoder family has two kinds of task)."""
    family = stamp(task)["family"]
    if family == "belief_mlm":
        from belief_tasks.scoring import belief_mlm

        return list(belief_mlm.BIAS_METRICS if "_bias_" in task else belief_mlm.PROMPT_METRICS)
    return list(metric_table(family))


def stamp(task: str) -> dict:
    """The ``metadata`` our task classes write into the results JSON: family and probe."""
    probe = task.replace("belief_demo_", "belief_")
    family = next(f for prefix, f in FAMILY_OF_PROBE if probe.startswith(prefix))
    return {"family": family, "probe": probe}


def write_run(
    root: Path,
    model: str,
    tasks: dict[str, list[dict]],
    results: dict[str, dict[str, float]],
    date: str = DATE,
    groups: dict[str, dict] | None = None,
    metadata: dict[str, dict] | None = None,
    references: bool = False,
) -> Path:
    """An lm-eval output folder for one model: results JSON + one samples file per task.
    ``references``: the record under the first metric only and ``<same as ...>`` under the others,
    as BELIEF-ICL logs it."""
    folder = root / model.replace("/", "__")
    folder.mkdir(parents=True, exist_ok=True)
    res = {t: {"alias": t, **{f"{m},none": v for m, v in vals.items()}} for t, vals in results.items()}
    for g, vals in (groups or {}).items():
        res[g] = {"alias": g, **{f"{m},none": v for m, v in vals.items()}}
    data = {
        "results": res,
        "group_subtasks": {g: list(tasks) for g in (groups or {})},
        "configs": {t: {"task": t, "metadata": {**stamp(t), **(metadata or {}).get(t, {})}} for t in tasks},
        "n-samples": {t: {"original": len(r), "effective": len(r)} for t, r in tasks.items()},
        "model_name": model,
        "model_args": f"pretrained={model}",
    }
    (folder / f"results_{date}.json").write_text(json.dumps(data))
    for t, records in tasks.items():
        names = task_metrics(t)  # as the harness logs: the record under every metric of the task
        with (folder / f"samples_{t}_{date}.jsonl").open("w") as fh:
            for i, rec in enumerate(records):
                line = {
                    "doc_id": i,
                    "doc": {},
                    "target": "",
                    "arguments": {},
                    "resps": [],
                    "filtered_resps": [],
                    "filter": "none",
                    "metrics": names,
                    **{n: f"<same as {names[0]}>" if references and k else rec for k, n in enumerate(names)},
                }
                fh.write(json.dumps(line) + "\n")
    return folder


def read_csv(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def close(a, b, tol=1e-9) -> bool:
    return math.isclose(float(a), float(b), rel_tol=tol, abs_tol=tol)


# --------------------------------------------------------------------------- BELIEF-ICL


def icl_record(pair, answers, correct, confidence, relation="P36", style="mp", context="zeroshot"):
    """One pair's record as ``belief_icl.make_record`` writes it: templates t1, t2, one subject expression,
    the prompt under t1 sampled."""
    return {
        "fact_id": pair,
        "relation": relation,
        "style": style,
        "context": context,
        "templates": ["t1", "t2"],
        "subjects": ["s"],
        "objects": ["Paris"],
        "answers": answers,
        "correct": correct,
        "sampled": 0,
        "confidence": confidence,
        "n_samples": 4,
        "seed": 1234,
        "draws": 2000,
        "bins": 2,
    }


ICL_A = [  # model A, MP zero-shot: p1 right under both templates, p2 right under t2 only
    icl_record("p1", ["Paris", "Paris"], [True, True], 0.9),
    icl_record("p2", ["Lyon", "Rome"], [False, True], 0.6),
]
ICL_B = [  # model B: only p2/t2 right
    icl_record("p1", ["London", "Berlin"], [False, False], 0.5),
    icl_record("p2", ["the city of Lyon", "Rome"], [False, True], 0.5),
]


def one_prompt_records(records: list[dict]) -> list[dict]:
    """The same prompts as logs before pair documents held them: one record per prompt."""
    return [
        {
            "fact_id": r["fact_id"],
            "relation": r["relation"],
            "template_id": t,
            "subject_form": "s",
            "style": r["style"],
            "context": r["context"],
            "output": a,
            "answer": a,
            "objects": r["objects"],
            "correct": c,
            "one_word": len(a.split()) == 1,
            "confidence": r["confidence"] if k == r["sampled"] else None,
            "n_samples": 4 if k == r["sampled"] else 0,
            "seed": 1234,
            "draws": 2000,
            "bins": 2,
        }
        for r in records
        for k, (t, a, c) in enumerate(zip(r["templates"], r["answers"], r["correct"]))
    ]


# hand-computed (see metrics/belief.py for the definitions)
ICL_A_HAND = {
    "coverage_average": 0.75,
    "coverage_maximum": 1.0,
    "coverage_oracle": 1.0,
    "consist": 0.5,
    "ovconf": ((0.9 - 1) + (0.6 - 0)) / 2,
    "one_word_ratio": 1.0,
}
ICL_B_HAND = {
    "coverage_average": 0.25,
    "coverage_maximum": 0.5,
    "coverage_oracle": 0.5,
    "consist": 0.0,
    "ovconf": 0.5,
    "one_word_ratio": 0.75,
}


@pytest.fixture(scope="module")
def icl_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("icl")
    out = root / "report"
    write_run(
        root / "runs", "org/model-A", {"belief_mp_zeroshot": ICL_A}, {"belief_mp_zeroshot": ICL_A_HAND}, references=True
    )
    write_run(
        root / "runs", "org/model-B", {"belief_mp_zeroshot": ICL_B}, {"belief_mp_zeroshot": ICL_B_HAND}, references=True
    )
    return build_report([root / "runs"], out), out


def test_icl_records_are_read_once_through_their_references(icl_report):
    (run,) = [r for r in load_runs([icl_report[1].parent / "runs"]) if r.name == "model-A"]
    task = run.tasks["belief_mp_zeroshot"]
    acc, consist = task.records("acc"), task.records("consist")
    assert acc == ICL_A and all(a is c for a, c in zip(acc, consist))


def test_icl_logs_of_one_prompt_records_give_the_same_tables(icl_report, tmp_path):
    write_run(
        tmp_path / "runs",
        "org/model-A",
        {"belief_mp_zeroshot": one_prompt_records(ICL_A)},
        {"belief_mp_zeroshot": ICL_A_HAND},
    )
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.mismatched == [] and report.checked == 6
    old = read_csv(tmp_path / "r" / "tables" / "belief_icl_table17.csv")[0]
    new = {r["Model"]: r for r in read_csv(icl_report[1] / "tables" / "belief_icl_table17.csv")}["model-A"]
    assert old == new


def test_icl_table17_and_coverage_equal_hand_values(icl_report):
    report, out = icl_report
    rows = {r["Model"]: r for r in read_csv(out / "tables" / "belief_icl_table17.csv")}
    assert set(rows) == {"model-A", "model-B"}
    for model, hand in (("model-A", ICL_A_HAND), ("model-B", ICL_B_HAND)):
        for m in ("consist", "ovconf", "one_word_ratio"):
            assert close(rows[model][m], hand[m]), (model, m, rows[model][m])
        # Acc@1 is the mean of 2000 seeded draws: near the exact expectation (= coverage average)
        assert abs(float(rows[model]["acc"]) - hand["coverage_average"]) < 0.03
        assert float(rows[model]["acc_range"]) > 0 and float(rows[model]["acc_sd"]) > 0
        assert rows[model]["facts"] == "2" and rows[model]["prompts"] == "4"
    cov = {r["Model"]: r for r in read_csv(out / "tables" / "belief_icl_coverage.csv")}
    for model, hand in (("model-A", ICL_A_HAND), ("model-B", ICL_B_HAND)):
        for m in ("coverage_average", "coverage_maximum", "coverage_oracle"):
            assert close(cov[model][m], hand[m]), (model, m)


def test_icl_check_counts_every_number_and_flags_none(icl_report):
    report, _ = icl_report
    assert report.checked == 12  # 6 hand-written values x 2 models
    assert report.mismatched == []


def test_plot_bins_keep_five_prompts_per_bin():
    from belief_tasks.report.belief_icl import plot_bins

    assert [plot_bins(10, n) for n in (2, 9, 10, 24, 50, 1000)] == [1, 1, 2, 4, 10, 10]


def test_icl_calibration_bins_and_sharing(icl_report):
    _, out = icl_report
    bins = [r for r in read_csv(out / "tables" / "belief_icl_calibration_bins.csv") if r["model"] == "model-A"]
    # two prompts with confidence (0.9 right, 0.6 wrong): fewer than 5 per bin, so the plot pools them in one bin
    assert [(float(b["confidence"]), float(b["accuracy"]), b["size"]) for b in bins] == [(0.75, 0.5, "2")]
    # covered (fact, template): A = {p1t1, p1t2, p2t2}, B = {p2t2}
    share = {r["covered by"]: r for r in read_csv(out / "tables" / "belief_icl_sharing_mp.csv")}
    a, b = "model-A · zero-shot", "model-B · zero-shot"
    assert close(share[a][b], 1 / 3) and close(share[b][a], 1.0) and close(share[a][a], 1.0)
    for name in ("belief_icl_calibration_model-A_mp.png", "belief_icl_sharing_mp.png"):
        assert (out / "figures" / name).stat().st_size > 5000


def test_icl_report_markdown_and_cards(icl_report):
    report, out = icl_report
    text = (out / "report.md").read_text()
    assert "## BELIEF-ICL" in text and "Knowledge card: model-A" in text
    assert "12 of 12 recomputed numbers equal" in text
    assert "figures/belief_icl_sharing_mp.png" in text
    card = (out / "cards" / "model-A.md").read_text()
    assert card.startswith("# Knowledge card: model-A") and "oracle coverage (MP)" in card and "zero-shot 1.000" in card


def test_mismatch_is_reported(tmp_path, capsys):
    wrong = dict(ICL_A_HAND, consist=0.9)
    write_run(tmp_path / "runs", "m", {"belief_mp_zeroshot": ICL_A}, {"belief_mp_zeroshot": wrong})
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "r")]) == 0
    assert report_main([str(tmp_path / "runs"), "--out", str(tmp_path / "r"), "--strict"]) == 1
    err = capsys.readouterr().err
    assert "differ from the results JSON" in err
    assert build_report([tmp_path / "runs"], tmp_path / "r2").mismatched == ["m:belief_mp_zeroshot/consist"]


# --------------------------------------------------------------------------- BEAR


def bear_record(relation, fact, t, ll, gold, cardinality, domains):
    return {
        "relation": relation,
        "fact_id": fact,
        "template_id": f"{relation}_t{t}",
        "template_index": t,
        "subject_form": "label",
        "cardinality": cardinality,
        "domains": domains,
        "scoring": "statement",
        "reduction": "sum",
        "gold": [gold],
        "ll": ll,
        "n_tokens": None,
    }


def bear_records():
    R = []
    # R1 (1:1, Geo): f1 right under both templates, f2 right under t0 only
    R += [
        bear_record("R1", "f1", 0, [-1, -5, -6], 0, "1:1", ["Geo"]),
        bear_record("R1", "f1", 1, [-1, -5, -6], 0, "1:1", ["Geo"]),
    ]
    R += [
        bear_record("R1", "f2", 0, [-9, -2, -6], 1, "1:1", ["Geo"]),
        bear_record("R1", "f2", 1, [-1, -5, -6], 1, "1:1", ["Geo"]),
    ]
    # R2 (1:N, Geo + People): f3 wrong under both, tie under t1 goes to the first option (gold 0: right)
    R += [
        bear_record("R2", "f3", 0, [-3, -2, -6], 0, "1:N", ["Geo", "People"]),
        bear_record("R2", "f3", 1, [-2, -2, -6], 0, "1:N", ["Geo", "People"]),
    ]
    return R


# per template: t0 = {f1 ok, f2 ok, f3 no} = 2/3; t1 = {f1 ok, f2 no, f3 ok (tie)} = 2/3
BEAR_HAND = {"bear": 2 / 3, "bear_1to1": 0.75, "bear_1toN": 0.5}


def test_bear_tables(tmp_path):
    write_run(tmp_path / "runs", "m", {"belief_bear": bear_records()}, {"belief_bear": BEAR_HAND})
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.checked == 3 and report.mismatched == []
    t3 = read_csv(tmp_path / "r" / "tables" / "bear_table3.csv")[0]
    assert close(t3["bear"], 2 / 3) and close(t3["bear_1to1"], 0.75) and close(t3["bear_1toN"], 0.5)
    assert close(t3["bear_stderr"], 0.0)  # both templates score 2/3
    # P@5 and P@10: every gold is in the top 3 options
    assert close(t3["p_at_5"], 1.0)
    per_t = {r["Template"]: r for r in read_csv(tmp_path / "r" / "tables" / "bear_templates.csv")}
    assert close(per_t["0"]["P@1"], 2 / 3) and close(per_t["1"]["P@1"], 2 / 3)
    assert close(per_t["0"]["stderr"], math.sqrt((1 / 3) / 3))  # sd of (1,1,0) / sqrt(3)
    rel = {r["relation"]: r for r in read_csv(tmp_path / "r" / "tables" / "bear_relations.csv")}
    assert close(rel["R1"]["m"], 0.75) and close(rel["R2"]["m"], 0.5)
    dom = {r["domain"]: r for r in read_csv(tmp_path / "r" / "tables" / "bear_domains.csv")}
    assert close(dom["Geo"]["m"], 4 / 6) and close(dom["People"]["m"], 0.5)
    assert (tmp_path / "r" / "figures" / "bear_relations.png").stat().st_size > 5000


# --------------------------------------------------------------------------- IC-LKE


def iclke_record(relation, fact, logprobs, gold):
    return {
        "relation": relation,
        "fact_id": fact,
        "template_id": "iclke-space",
        "subject_form": "label",
        "method": "iclke",
        "gold_index": gold,
        "logprobs": logprobs,
        "options": ["a", "b"],
        "correct": logprobs[gold] == max(logprobs),
    }


RIGHT, WRONG = ([-0.1, -3.0], 0), ([-3.0, -0.1], 0)  # (logprobs, gold): confident right / confident wrong


def iclke_run(known: dict[str, set]) -> list[dict]:
    facts = {"R1": ["a1", "a2", "a3", "a4"], "R2": ["b1", "b2"]}
    return [
        iclke_record(rel, f, *(RIGHT if f in known.get(rel, set()) else WRONG)) for rel, fs in facts.items() for f in fs
    ]


def test_iclke_ranking_heatmap_subsumption_acc_at_k(tmp_path):
    small = {"R1": {"a1", "a2"}, "R2": {"b1"}}
    large = {"R1": {"a1", "a3", "a4"}, "R2": {"b1", "b2"}}
    write_run(
        tmp_path / "runs", "small", {"belief_iclke": iclke_run(small)}, {"belief_iclke": {"acc_macro": 0.5, "acc": 0.5}}
    )
    write_run(
        tmp_path / "runs",
        "large",
        {"belief_iclke": iclke_run(large)},
        {"belief_iclke": {"acc_macro": 0.875, "acc": 5 / 6}},
    )
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.checked == 4 and report.mismatched == []
    ranking = read_csv(tmp_path / "r" / "tables" / "iclke_ranking_belief_iclke.csv")
    assert [(r["rank"], r["model"]) for r in ranking] == [("1", "large"), ("2", "small")]
    per_rel = {r["relation"]: r for r in read_csv(tmp_path / "r" / "tables" / "iclke_relations_belief_iclke.csv")}
    assert close(per_rel["R1"]["small"], 0.5) and close(per_rel["R2"]["large"], 1.0)
    eta = {r["known by"]: r for r in read_csv(tmp_path / "r" / "tables" / "iclke_subsumption_belief_iclke.csv")}
    # η(small | large): R1 1/2 (a1 of a1, a2), R2 1/1 -> 0.75; η(large | small): R1 1/3, R2 1/2 -> 5/12
    assert close(eta["small"]["large"], 0.75) and close(eta["large"]["small"], 5 / 12)
    acck = [r for r in read_csv(tmp_path / "r" / "tables" / "iclke_acc_at_k_belief_iclke.csv") if r["model"] == "small"]
    # every prediction has confidence 1/(1+e^-2.9) ≈ 0.948: all kept up to K=0.9, accuracy = pooled 0.5
    assert [float(r["accuracy@K"]) for r in acck] == [0.5] * 9
    assert all(float(r["share with confidence ≥ K"]) == 1.0 for r in acck)
    assert (tmp_path / "r" / "figures" / "iclke_subsumption_belief_iclke.png").is_file()


# --------------------------------------------------------------------------- MONITOR


def monitor_record(relation, fact, primary, frames, negatives, correct):
    return {
        "relation": relation,
        "fact_id": fact,
        "template_id": "f0",
        "subject_form": "label",
        "object": "o",
        "route": "prefix",
        "units": [" o"],
        "n_tokens": 1,
        "primary": primary,
        "frame_ids": [f"f{i}" for i in range(len(frames))],
        "frames": frames,
        "negative_labels": ["n"],
        "negatives": negatives,
        "positive_answer": "o",
        "positive_correct": 1,
        "answers": ["o"] * len(frames),
        "correct": correct,
        "alpha": [0.33, 0.33, 0.33],
        "only_correct_primary": False,
    }


def monitor_value(p, frames, negs):
    pfd = sum(abs(p - q) for q in frames) / len(frames)
    ird = sum(abs(p - q) for q in negs) / len(negs)
    return math.sqrt(0.33 * pfd**2 + 0.33 * ird**2 + 0.33 * pfd * ird) / p


def test_monitor_tables_and_correlation(tmp_path):
    # three models; per model one fact in each of two relations; accuracies chosen to fall as MONITOR rises
    specs = {"m1": (0.8, 0.6, 0.2, [1, 1]), "m2": (0.8, 0.5, 0.2, [1, 0]), "m3": (0.8, 0.4, 0.2, [0, 0])}
    hand = {}
    for model, (p, q, n, correct) in specs.items():
        recs = [
            monitor_record("P17", "a", [p], [[q], [q]], [[n]], correct),
            monitor_record("P19", "b", [p], [[q], [q]], [[n]], correct),
        ]
        hand[model] = {"monitor": monitor_value(p, [q, q], [n]), "acc_avg": sum(correct) / 2}
        write_run(tmp_path / "runs", model, {"belief_monitor_sample": recs}, {"belief_monitor_sample": hand[model]})
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.mismatched == [] and report.checked == 6
    t4 = {r["model"]: r for r in read_csv(tmp_path / "r" / "tables" / "monitor_table4_belief_monitor_sample.csv")}
    for model in specs:
        assert close(t4[model]["monitor"], hand[model]["monitor"])
        assert close(t4[model]["acc_avg"], hand[model]["acc_avg"])
        assert close(t4[model]["primary_prob"], 0.8)
        assert close(t4[model]["acc_max"], max(specs[model][3])) and close(t4[model]["acc_min"], min(specs[model][3]))
    t11 = {r["relation"]: r for r in read_csv(tmp_path / "r" / "tables" / "monitor_table11_belief_monitor_sample.csv")}
    assert close(t11["P19"]["m2 MONITOR"], hand["m2"]["monitor"]) and close(t11["P17"]["m3 avg acc"], 0.0)
    text = (tmp_path / "r" / "report.md").read_text()
    from scipy.stats import pearsonr

    r, p = pearsonr([hand[m]["monitor"] for m in specs], [hand[m]["acc_avg"] for m in specs])
    assert r < -0.9
    assert f"Pearson r(MONITOR, avg acc) = **{r:.3f}** (p = {p:.3f}, n = 3 models)" in text
    # the three runs share their facts: paired differences of the metrics their records give, none of the R x M
    # accuracies or costs (these records have neither) and no third frame
    paired = {row["metric"] for row in read_csv(tmp_path / "r" / "tables" / "paired_differences.csv")}
    assert {"monitor", "acc_avg", "acc_frame_1"} <= paired
    assert not {m for m in paired if m.startswith(("acc_paper", "cost_"))} and "acc_frame_2" not in paired


def test_monitor_one_task_per_relation_numbers_from_its_records(tmp_path):
    # belief_monitor with relations=P17,P19: one task, per-relation values recomputed from its records
    recs = [
        monitor_record("P17", "a", [0.8], [[0.6]], [[0.2]], [1]),
        monitor_record("P19", "b", [0.5], [[0.5]], [[0.5]], [0]),
    ]
    m17, m19 = monitor_value(0.8, [0.6], [0.2]), 0.0
    write_run(
        tmp_path / "runs",
        "m",
        {"belief_monitor": recs},
        {"belief_monitor": {"monitor": (m17 + m19) / 2, "acc_avg": 0.5}},
    )
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.mismatched == [] and report.checked == 2
    t4 = read_csv(tmp_path / "r" / "tables" / "monitor_table4_belief_monitor.csv")[0]
    assert close(t4["monitor"], (m17 + m19) / 2) and t4["relations"] == "2" and t4["facts"] == "2"
    t11 = {r["relation"]: r for r in read_csv(tmp_path / "r" / "tables" / "monitor_table11_belief_monitor.csv")}
    assert close(t11["P17"]["m MONITOR"], m17) and close(t11["P19"]["m MONITOR"], m19)
    assert close(t11["P17"]["m avg acc"], 1.0) and close(t11["P19"]["m avg acc"], 0.0)


# --------------------------------------------------------------------------- loading


def test_loading_layouts_and_errors(tmp_path):
    a = write_run(tmp_path / "out1", "org/A", {"belief_mp_zeroshot": ICL_A}, {"belief_mp_zeroshot": {}})
    write_run(tmp_path / "out2", "org/A", {"belief_mp_zeroshot": ICL_B}, {"belief_mp_zeroshot": {}})
    # one model folder, two output paths with the same model (names made unique), a results file
    assert [r.name for r in load_runs([a])] == ["A"]
    assert sorted(r.name for r in load_runs([tmp_path / "out1", tmp_path / "out2"])) == ["A (out1)", "A (out2)"]
    runs = load_runs([next(a.glob("results_*.json"))])
    assert runs[0].tasks["belief_mp_zeroshot"].records()[1]["answers"] == ["Lyon", "Rome"]
    # a newer run of the same task in the same folder wins
    write_run(
        tmp_path / "out1",
        "org/A",
        {"belief_mp_zeroshot": ICL_B},
        {"belief_mp_zeroshot": {}},
        date="2026-02-01T00-00-00.000001",
    )
    assert load_runs([a])[0].tasks["belief_mp_zeroshot"].records()[0]["answers"][0] == "London"
    # --output_path ending in .json: "<stem>_<date>.json" with the samples beside it
    flat = tmp_path / "flat"
    flat.mkdir()
    (a / f"results_{DATE}.json").rename(flat / f"myrun_{DATE}.json")
    (a / f"samples_belief_mp_zeroshot_{DATE}.jsonl").rename(flat / f"samples_belief_mp_zeroshot_{DATE}.jsonl")
    (run,) = load_runs([flat])
    assert run.name == "A" and run.tasks["belief_mp_zeroshot"].records()[0]["answers"][0] == "Paris"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportInputError, match="no lm-eval results"):
        load_runs([tmp_path / "empty"])
    with pytest.raises(ReportInputError, match="no such folder"):
        load_runs([tmp_path / "missing"])
    assert report_main([str(tmp_path / "missing"), "--out", str(tmp_path / "r")]) == 2


# --------------------------------------------------------------------------- BELIEF for masked LMs


def mlm_record(fact, template, pred, rank, confidence):
    return {
        "relation": "P36",
        "fact_id": fact,
        "template_id": template,
        "subject_form": "s",
        "pred": pred,
        "confidence": confidence,
        "confidence_top10": min(1.0, confidence + 0.1),
        "gold": "paris",
        "gold_rank": rank,
        "top": [pred],
        "seed": 1234,
        "draws": 2000,
        "relation_kept": 4,
        "relation_dropped": 1,
    }


def test_mlm_table_and_calibration(tmp_path):
    recs = [
        mlm_record("f1", "t1", "paris", 1, 0.8),
        mlm_record("f1", "t2", "paris", 1, 0.6),
        mlm_record("f2", "t1", "lyon", 2, 0.4),
        mlm_record("f2", "t2", "rome", None, 0.2),
    ]
    # MRR: f1 1, f2 (1/2 + 0) / 2 = 1/4 -> 0.625; Consist: f1 1, f2 0 -> 0.5; Ovconf@1: mean conf 0.5 - acc 0.5 = 0
    hand = {"mrr": 0.625, "consist": 0.5, "overconf@1": 0.0, "prompts_kept": 4, "prompts_dropped": 1}
    write_run(tmp_path / "runs", "bert", {"belief_mlm_myriadlama": recs}, {"belief_mlm_myriadlama": hand})
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.checked == 5 and report.mismatched == []
    row = read_csv(tmp_path / "r" / "tables" / "belief_mlm_table17.csv")[0]
    assert close(row["mrr"], 0.625) and close(row["consist"], 0.5) and abs(float(row["acc@1"]) - 0.5) < 0.03
    assert abs(float(row["acc@10"]) - 0.75) < 0.03  # f1 always, f2 under t1 only
    (b,) = read_csv(tmp_path / "r" / "tables" / "belief_mlm_calibration_bins.csv")  # 4 prompts: one plotted bin
    assert close(b["confidence"], 0.5) and close(b["accuracy"], 0.5)
    card = (tmp_path / "r" / "cards" / "bert.md").read_text()
    assert "BELIEF (masked LMs)" in card and "Acc@10 [belief_mlm_myriadlama] ↑: 0.7" in card


def test_variants_including_our_yamls_join_their_family(tmp_path):
    """``belief_demo_*`` tasks include ours (``include: ../bear/belief_bear.yaml``): same section, same check."""
    write_run(
        tmp_path / "runs",
        "m",
        {"belief_demo_bear": bear_records(), "belief_demo_mp_4template": ICL_A},
        {"belief_demo_bear": BEAR_HAND, "belief_demo_mp_4template": ICL_A_HAND},
    )
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    assert report.checked == 9 and report.mismatched == []
    # the agreement section says that the two probes read different datasets, so nothing is joined
    assert [s.title for s in report.sections] == ["BELIEF-ICL", "BEAR", "Agreement between probes"]
    (t17,) = read_csv(tmp_path / "r" / "tables" / "belief_icl_table17.csv")
    assert (t17["task"], t17["Style"], t17["Setting"]) == ("belief_demo_mp_4template", "MP", "4-template")


def test_samples_pair_with_their_own_results_only(tmp_path, caplog):
    """The newest results JSON never borrows an older run's samples, and counts must agree (fail-fast issue)."""
    write_run(
        tmp_path / "runs",
        "m",
        {"belief_mp_zeroshot": ICL_A},
        {"belief_mp_zeroshot": ICL_A_HAND},
        date="2026-01-01T00-00-00.000001",
    )
    newer = write_run(tmp_path / "runs", "m", {"belief_mp_zeroshot": ICL_B}, {"belief_mp_zeroshot": ICL_B_HAND})
    (newer / f"samples_belief_mp_zeroshot_{DATE}.jsonl").unlink()  # the newest run's samples are missing
    (run,) = load_runs([tmp_path / "runs"])
    task = run.tasks["belief_mp_zeroshot"]
    assert task.samples_path is None and task.records() == []
    assert "no samples file of run" in caplog.text
    # a samples file with fewer records than its results JSON counts is refused
    folder = write_run(tmp_path / "other", "m", {"belief_mp_zeroshot": ICL_A}, {"belief_mp_zeroshot": ICL_A_HAND})
    path = folder / f"samples_belief_mp_zeroshot_{DATE}.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:-1]))
    (run,) = load_runs([tmp_path / "other"])
    with pytest.raises(ReportInputError, match="come from different runs"):
        run.tasks["belief_mp_zeroshot"].records()


def test_strict_fails_when_samples_are_missing_or_from_another_run(tmp_path, capsys):
    """Under --strict a number that could not be recomputed is a failure, not a warning."""
    runs = tmp_path / "runs"
    write_run(
        runs,
        "m",
        {"belief_mp_zeroshot": ICL_A, "belief_bear": bear_records()},
        {"belief_mp_zeroshot": ICL_A_HAND, "belief_bear": BEAR_HAND},
    )
    assert report_main([str(runs), "--out", str(tmp_path / "r"), "--strict"]) == 0  # complete: passes
    full = build_report([runs], tmp_path / "r").checked
    (runs / "m" / f"samples_belief_bear_{DATE}.jsonl").unlink()  # run without --log_samples
    # BEAR's 3 numbers are shown from the results JSON, but not counted as checked: nothing recomputed them
    assert build_report([runs], tmp_path / "r").checked == full - 3
    assert report_main([str(runs), "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert report_main([str(runs), "--out", str(tmp_path / "r"), "--strict"]) == 1
    err = capsys.readouterr().err
    assert "--strict: 1 task(s) could not be recomputed" in err and "m / belief_bear: no samples file" in err
    # the newest run's samples missing, an older run's present: not paired, and a failure under --strict
    newer = "2026-02-02T00-00-00.000001"
    write_run(runs, "m", {"belief_mp_zeroshot": ICL_B}, {"belief_mp_zeroshot": ICL_B_HAND}, date=newer)
    (runs / "m" / f"samples_belief_mp_zeroshot_{newer}.jsonl").unlink()
    assert report_main([str(runs), "--out", str(tmp_path / "r"), "--strict"]) == 1
    err = capsys.readouterr().err
    assert (
        f"m / belief_mp_zeroshot: no samples file of run {newer} (only samples_belief_mp_zeroshot_{DATE}.jsonl" in err
    )


def test_card_and_report_stamp_facts_backend_and_limit(tmp_path, monkeypatch):
    """The card says how many facts stand behind each family's numbers, which backend ran, and a --limit;
    the report's runs table says the same; a model path under the home folder is written with ~."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    model = str(tmp_path / "home" / "models" / "m")
    folder = write_run(
        tmp_path / "runs",
        model,
        {"belief_mp_zeroshot": ICL_A, "belief_qa_zeroshot": ICL_B[:1]},
        {"belief_mp_zeroshot": ICL_A_HAND, "belief_qa_zeroshot": {}},
    )
    path = next(folder.glob("results_*.json"))
    data = json.loads(path.read_text())
    data["config"] = {"model": "hf-shared", "limit": 2.0}
    path.write_text(json.dumps(data))
    report = build_report([tmp_path / "runs"], tmp_path / "r")
    card = next((tmp_path / "r" / "cards").glob("*.md")).read_text()
    assert "model `~/models/m`" in card and str(tmp_path) not in card
    assert "backend `hf-shared`" in card
    assert (
        "**--limit 2: each task scored only its first 2 documents, so these numbers are not the tasks' values" in card
    )
    assert "| facts | mp: 2<br>qa: 1 |" in card.replace("belief_mp_zeroshot", "mp").replace("belief_qa_zeroshot", "qa")
    text = report.path.read_text()
    assert "| ~/models/m | hf-shared | 2 |" in text
    assert any("--limit 2" in line for line in report.summary)


def test_card_without_limit_says_nothing_of_it_and_counts_equal_facts_once(icl_report):
    _, out = icl_report
    card = (out / "cards" / "model-A.md").read_text()
    assert "--limit" not in card and "| facts | 2 |" in card
