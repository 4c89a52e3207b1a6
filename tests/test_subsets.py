"""Metrics on a subset of a run's facts (trained / held-out), with intervals over facts: hand-made BEAR records."""

import math

import numpy as np

from belief_tasks.facts.split import FactSplit
from belief_tasks.families import FAMILIES
from belief_tasks.scoring import bear
from belief_tasks.scoring.subsets import paired_subset_estimates, subset_estimates

EST = FAMILIES["bear"].budgeted


def records(correct: dict[str, bool]) -> list[dict]:
    """One BEAR record per fact (one template, three options, gold option 0), relations R1 / R2 alternating."""
    out = []
    for i, (fact, ok) in enumerate(sorted(correct.items())):
        rel = "R1" if i % 2 == 0 else "R2"
        out.append(
            {
                "fact_id": fact,
                "relation": rel,
                "fact_key": {"key": f"{rel}|{fact}"},
                "template_id": f"{rel}_t0",
                "template_index": 0,
                "subject_form": "label",
                "cardinality": "N:1",
                "domains": [],
                "scoring": "statement",
                "reduction": "sum",
                "gold": [0],
                "n_tokens": None,
                "ll": [-1.0, -2.0, -3.0] if ok else [-3.0, -1.0, -2.0],
            }
        )
    return out


def test_subset_estimate_is_the_aggregation_on_the_subset_with_an_interval_over_facts():
    rng = np.random.default_rng(0)
    correct = {f"f{i:02d}": bool(rng.random() < (0.8 if i < 20 else 0.2)) for i in range(40)}
    recs = records(correct)
    split = FactSplit(
        frozenset(r["fact_key"]["key"] for r in recs[:20]),
        frozenset(r["fact_key"]["key"] for r in recs[20:]),
        seed=0,
        share=0.5,
    )
    for side, part in (("trained", recs[:20]), ("held-out", recs[20:])):
        found = subset_estimates(EST, recs, lambda r, s=side: split.of_record(r) == s)["bear"]
        assert math.isclose(found.estimate, bear.agg_bear(part), abs_tol=1e-12)  # plain value on the subset
        assert found.low < found.estimate < found.high  # a real interval: facts vary
    # the same run against itself: difference exactly 0, zero width
    same = paired_subset_estimates(EST, recs, recs, lambda r: split.of_record(r) == "trained")["bear"]
    assert same.estimate == 0 and same.low == same.high == 0
    # every fact of the trained side learnt: the paired difference is the share that was not known before
    learnt = records({f: (True if i < 20 else ok) for i, (f, ok) in enumerate(sorted(correct.items()))})
    diff = paired_subset_estimates(EST, learnt, recs, lambda r: split.of_record(r) == "trained")["bear"]
    assert math.isclose(diff.estimate, 1 - bear.agg_bear(recs[:20]), abs_tol=1e-12)
    assert diff.low > 0  # beyond its interval
    held = paired_subset_estimates(EST, learnt, recs, lambda r: split.of_record(r) == "held-out")["bear"]
    assert held.estimate == 0
