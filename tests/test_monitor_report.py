"""belief-report's MONITOR section with the paper's accuracy: Table 4's R x M columns, r(MONITOR, avg acc)
across one model's relations, across models (Table 4) and per relation across models (Table 12), and the
cost table (Table 8), on hand-written runs (only one model is available offline)."""

from __future__ import annotations

import pytest
from scipy.stats import pearsonr
from test_report_synthetic import close, monitor_record, monitor_value, read_csv, write_run

from belief_tasks.report import build_report

RELATIONS = ("P17", "P19", "P20")
COST = {
    "anchors": {"requests": 13, "tokens": 300},
    "answers": {"requests": 8, "tokens": 200},
    "interference": {"requests": 14, "tokens": 900},
}


def paper_record(relation, fact, p, q, grid):
    """One fact: primary p, two frames at q, one negative at q; R x M = 2 x 1... widened to 2 x 7 by ``grid``."""
    rec = monitor_record(relation, fact, [p], [[q], [q]], [[q]], [1, 0])
    rec.update(
        interference_answers=[["o" if c else "x" for c in row] for row in grid],
        interference_correct=grid,
        accuracy="paper",
        cost=COST,
    )
    return rec


def grid_with(k: int) -> list[list[int]]:
    """A 2 x 7 grid with k right answers (k / 14 accuracy)."""
    flat = [1] * k + [0] * (14 - k)
    return [flat[:7], flat[7:]]


# per model, per relation: (q, right answers of 14); MONITOR falls as q nears p = 0.8 and accuracy rises
SPECS = {
    "m1": {"P17": (0.7, 12), "P19": (0.5, 7), "P20": (0.3, 2)},
    "m2": {"P17": (0.6, 9), "P19": (0.6, 10), "P20": (0.2, 1)},
    "m3": {"P17": (0.4, 3), "P19": (0.3, 4), "P20": (0.1, 0)},
}


def hand_numbers(spec: dict) -> tuple[dict, dict]:
    """Per relation MONITOR (one fact: eq. 3 on it) and R x M accuracy."""
    mon = {rel: monitor_value(0.8, [q, q], [q]) for rel, (q, _) in spec.items()}
    acc = {rel: k / 14 for rel, (_, k) in spec.items()}
    return mon, acc


@pytest.fixture(scope="module")
def paper_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("monitor_paper")
    hand = {}
    for model, spec in SPECS.items():
        recs = [paper_record(rel, f"{rel}_1", 0.8, q, grid_with(k)) for rel, (q, k) in spec.items()]
        mon, acc = hand_numbers(spec)
        hand[model] = (mon, acc)
        results = {
            "monitor": sum(mon.values()) / 3,
            "acc_paper_avg": sum(acc.values()) / 3,
            "cost_anchor_requests": 39,
            "cost_paper_tokens": 2700,
        }
        write_run(root / "runs", model, {"belief_monitor": recs}, {"belief_monitor": results})
    report = build_report([root / "runs"], root / "r")
    return report, root / "r", hand


def test_table4_has_the_r_x_m_accuracies(paper_report):
    report, out, hand = paper_report
    assert report.mismatched == [] and report.checked == 12
    t4 = {r["model"]: r for r in read_csv(out / "tables" / "monitor_table4_belief_monitor.csv")}
    mon, acc = hand["m1"]
    assert close(t4["m1"]["acc_paper_avg"], sum(acc.values()) / 3)
    # one fact per relation: every combination's accuracy is 0 or 1; the range ends, averaged over relations
    assert close(t4["m1"]["acc_paper_max"], 1.0) and close(t4["m3"]["acc_paper_max"], 2 / 3)
    assert close(t4["m1"]["acc_paper_min"], 0.0)
    md = (out / "report.md").read_text()
    assert "avg acc (R×M) ↑" in md


def test_correlation_across_one_models_relations(paper_report):
    _, out, hand = paper_report
    rows = {r["model"]: r for r in read_csv(out / "tables" / "monitor_relation_correlation_belief_monitor.csv")}
    for model, (mon, acc) in hand.items():
        r, p = pearsonr([mon[rel] for rel in RELATIONS], [acc[rel] for rel in RELATIONS])
        assert (
            close(rows[model]["Pearson r"], r) and close(rows[model]["p-value"], p) and rows[model]["relations"] == "3"
        )
    assert float(rows["m1"]["Pearson r"]) < -0.9


def test_correlation_across_models_and_per_relation(paper_report):
    _, out, hand = paper_report
    models = list(SPECS)
    avg_mon = [sum(hand[m][0].values()) / 3 for m in models]
    avg_acc = [sum(hand[m][1].values()) / 3 for m in models]
    r, p = pearsonr(avg_mon, avg_acc)
    md = (out / "report.md").read_text()
    assert f"Pearson r(MONITOR, avg acc) = **{r:.3f}** (p = {p:.3f}, n = 3 models). Accuracy: avg acc over R×M" in md
    t12 = {row["relation"]: row for row in read_csv(out / "tables" / "monitor_table12_belief_monitor.csv")}
    for rel in RELATIONS:
        r, p = pearsonr([hand[m][0][rel] for m in models], [hand[m][1][rel] for m in models])
        assert close(t12[rel]["Pearson r"], r) and close(t12[rel]["p-value"], p)
    t11 = {row["relation"]: row for row in read_csv(out / "tables" / "monitor_table11_belief_monitor.csv")}
    assert close(t11["P19"]["m2 avg acc"], 10 / 14)  # Table 11's accuracy is the R x M one here


def test_cost_table(paper_report):
    _, out, _ = paper_report
    rows = {r["model"]: r for r in read_csv(out / "tables" / "monitor_cost_belief_monitor.csv")}
    m1 = rows["m1"]
    assert close(m1["anchors requests"], 39) and close(m1["R×M answers tokens"], 2700)
    assert close(m1["R×M / anchors (requests)"], 14 / 13) and close(m1["R×M / anchors (tokens)"], 3.0)


def test_runs_without_the_grid_compare_the_frame_accuracy(tmp_path):
    """A frames run (the default) keeps the frame-only accuracy, named as such, and shows no R x M columns."""
    recs = [
        monitor_record(rel, f"{rel}_1", [0.8], [[q], [q]], [[q]], c)
        for rel, q, c in (("P17", 0.7, [1, 1]), ("P19", 0.5, [1, 0]), ("P20", 0.2, [0, 0]))
    ]
    write_run(tmp_path / "runs", "m", {"belief_monitor": recs}, {"belief_monitor": {"acc_avg": 0.5}})
    build_report([tmp_path / "runs"], tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert "avg acc (R×M)" not in md and "avg acc (frames) ↑" in md
    (row,) = read_csv(tmp_path / "r" / "tables" / "monitor_relation_correlation_belief_monitor.csv")
    mon = [monitor_value(0.8, [q, q], [q]) for q in (0.7, 0.5, 0.2)]
    assert close(row["Pearson r"], pearsonr(mon, [1.0, 0.5, 0.0])[0])
    assert not (tmp_path / "r" / "tables" / "monitor_cost_belief_monitor.csv").exists()  # no counts in old records
    assert read_csv(tmp_path / "r" / "tables" / "monitor_table4_belief_monitor.csv")[0]["acc_paper_avg"] == ""  # NaN
