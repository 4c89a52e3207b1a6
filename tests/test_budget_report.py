"""belief-report on budgeted runs: estimates instead of plain values, paired differences with paired
intervals for runs on the same facts, interval bands on training curves, and the card's budget line."""

from __future__ import annotations

import numpy as np
import pytest
from test_report_synthetic import read_csv, write_run

from belief_tasks.families import BEAR
from belief_tasks.report import build_report
from belief_tasks.scoring import budgeted
from belief_tasks.scoring.bear import METRICS
from belief_tasks.scoring.wiring import Aggregation

POPULATION = {"P1": 40, "P2": 12}


def bear_records(seed: int, drawn: dict[str, int], skill: float) -> list[dict]:
    """BEAR records of facts drawn from two relations (3 templates, 4 options), a fact right under a
    template with probability ``skill`` (the same facts whatever ``skill``: a paired comparison)."""
    rng = np.random.default_rng(seed)
    out = []
    for rel, n in drawn.items():
        for i in range(n):
            for t in range(3):
                right = rng.random() < skill
                out.append(
                    {
                        "relation": rel,
                        "fact_id": f"{rel}_{i}",
                        "template_id": f"{rel}t{t}",
                        "template_index": t,
                        "subject_form": "label",
                        "cardinality": "1:1" if rel == "P2" else "1:N",
                        "domains": [],
                        "scoring": "statement",
                        "reduction": "sum",
                        "gold": [0],
                        "ll": [-1.0, -2.0, -3.0, -4.0] if right else [-2.0, -1.0, -3.0, -4.0],
                        "n_tokens": None,
                        "budget": 0.2,
                        "population": POPULATION[rel],
                        "drawn": n,
                    }
                )
    return out


def _write(root, model, records, design, step=None):
    wrapped = {m: Aggregation(m, declared, BEAR.budgeted) for m, declared in METRICS.items()}
    values = {m: float(fn(records)) for m, fn in wrapped.items()}
    name = model if step is None else f"{model}/checkpoint-{step}"
    return write_run(
        root,
        name,
        {"belief_bear": records},
        {"belief_bear": values},
        metadata={"belief_bear": {"budget": 0.2, "budget_design": design}},
    )


DESIGN = {
    "budget": 0.2,
    "seed": 1234,
    "facts_drawn": 10,
    "facts_in_population": 52,
    "relations": {"P1": {"population": 40, "drawn": 8}, "P2": {"population": 12, "drawn": 2}},
}


def test_budgeted_aggregation_estimates_the_full_run_by_relation_weights():
    recs = bear_records(0, {"P1": 8, "P2": 2}, 0.5)
    agg = Aggregation("p_at_1", METRICS["p_at_1"], BEAR.budgeted)
    by_rel = {r: np.mean([x["ll"][0] > x["ll"][1] for x in recs if x["relation"] == r]) for r in POPULATION}
    assert agg(recs) == pytest.approx((40 * by_rel["P1"] + 12 * by_rel["P2"]) / 52)
    assert METRICS["p_at_1"].aggregation(recs) == pytest.approx(
        (8 * by_rel["P1"] + 2 * by_rel["P2"]) / 10
    )  # unweighted
    iv = agg.interval(recs)
    assert iv.low < agg(recs) < iv.high and agg.stderr(recs) == pytest.approx(iv.se)
    with pytest.raises(budgeted.BudgetError, match="no --limit"):
        agg(recs[:-3])  # a drawn fact without records


def test_report_prints_paired_differences_and_the_budget(tmp_path):
    a = bear_records(1, {"P1": 8, "P2": 2}, 0.7)
    b = [dict(r) for r in a]
    for r in b[::4]:  # model B misses some of A's right answers
        r["ll"] = [-2.0, -1.0, -3.0, -4.0]
    _write(tmp_path, "model-a", a, DESIGN)
    _write(tmp_path, "model-b", b, DESIGN)
    report = build_report([tmp_path], tmp_path / "report")
    rows = read_csv(tmp_path / "report" / "tables" / "paired_differences.csv")
    bear = next(r for r in rows if r["metric"] == "bear")
    want = budgeted.paired_estimates(BEAR.budgeted, a, b)["bear"]
    assert float(bear["difference"]) == pytest.approx(want.estimate)
    assert float(bear["low"]) == pytest.approx(want.low) and float(bear["high"]) == pytest.approx(want.high)
    agg = Aggregation("bear", METRICS["bear"], BEAR.budgeted)
    assert want.estimate == pytest.approx(agg(a) - agg(b))
    # pairing narrows the interval: narrower than the two runs' own intervals combined
    widths = [agg.interval(x).high - agg.interval(x).low for x in (a, b)]
    assert want.high - want.low < np.hypot(*widths)
    text = report.path.read_text()
    assert "estimated from 10 of 52 facts (budget 0.2" in text
    assert "| facts | 10 of 52 (budget 0.2) |" in text  # the card's facts row
    assert any("model-a − model-b: " in line and "[" in line for line in report.summary)
    assert not report.mismatched


def test_training_curve_of_budgeted_checkpoints_has_interval_bands(tmp_path):
    for step, skill in ((100, 0.3), (200, 0.6)):
        _write(tmp_path, "org/model", bear_records(step, {"P1": 8, "P2": 2}, skill), DESIGN, step=step)
    build_report([tmp_path], tmp_path / "report")
    table = next((tmp_path / "report" / "tables").glob("training_*.csv"))
    rows = read_csv(table)
    assert len(rows) == 2 and all(float(r["low"]) < float(r["value"]) < float(r["high"]) for r in rows)


def test_a_budgeted_run_end_to_end_writes_estimates_intervals_and_the_draw(tmp_path):
    """belief-eval with lm-eval's dummy model on the sample at 20 %: the results JSON holds the draw,
    every estimate with its standard error and interval, NaN for what a sample cannot estimate, and
    belief-report recomputes every number from the records."""
    import json
    import math

    from harness import read_results, run_cli

    metadata = {"source": "sample", "budget": 0.2, "confidence_prompts": 100, "confidence_samples": 2}
    done = run_cli(
        [
            "--model",
            "dummy",
            "--tasks",
            "belief_mp_4template,belief_bear",
            "--metadata",
            json.dumps(metadata),
            "--output_path",
            str(tmp_path / "out"),
            "--log_samples",
        ],
        timeout=900,
        HF_HUB_OFFLINE="1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = read_results(tmp_path / "out")
    design = data["configs"]["belief_bear"]["metadata"]["budget_design"]
    assert design["budget"] == 0.2 and design["facts_in_population"] == 671
    assert design["facts_drawn"] == sum(r["drawn"] for r in design["relations"].values())
    res = data["results"]["belief_mp_4template"]
    assert math.isnan(res["acc_range,none"]) and "acc_range_ci95,none" not in res
    for metric in ("acc", "consist", "ovconf", "coverage_oracle"):
        low, high = res[f"{metric}_ci95,none"]
        assert low <= res[f"{metric},none"] <= high and res[f"{metric}_stderr,none"] >= 0
    # the printed table rounds the bounds as it rounds the values; the results JSON keeps every digit
    low, high = res["acc_ci95,none"]
    row = next(line for line in done.stdout.splitlines() if "|acc_ci95 " in line)
    assert f"|[{low:.4f},{high:.4f}]|" in row.replace(" ", ""), row
    report = build_report([tmp_path / "out"], tmp_path / "report")
    assert report.checked > 10 and not report.mismatched
    from belief_tasks.data import load_facts
    from belief_tasks.facts.budget import allocation

    fs = load_facts("bear", {"source": "sample"})
    drawn = sum(allocation(0.2, len(fs.facts_of(r))) for r in fs.relations)
    assert design["facts_drawn"] == drawn
    assert f"`belief_bear`: estimated from {drawn} of 671 facts (budget 0.2" in report.path.read_text()
