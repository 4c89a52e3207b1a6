"""The report's training section with a fact split: the probes' per-fact agreement followed across checkpoints,
on hand-made BELIEF-ICL records of three checkpoints (values computed by hand below)."""

import math
import os

import pytest
from test_report_synthetic import icl_record, read_csv, write_run

from belief_tasks.facts.schema import FactKey, fold_label
from belief_tasks.facts.split import FactSplit
from belief_tasks.report import build_report

T, F = True, False
TRAINED_FACTS, HELD_FACTS = ["Aa", "Bb", "Cc", "Dd"], ["Ee", "Ff", "Gg", "Hh"]
OUTSIDE = "Zz"  # a fact the split does not know: on neither side
SUBJECTS = TRAINED_FACTS + HELD_FACTS + [OUTSIDE]
HOME = os.path.expanduser("~")  # the checkpoints sit in the home folder, which a shared report must not name


def key(subject: str) -> FactKey:
    return FactKey("P36", fold_label(subject), None, (fold_label(subject),), ("x",), ())


#: step -> probe -> known per subject (trained Aa..Dd, held-out Ee..Hh, outside Zz)
KNOWN = {
    0: {"belief_mp_zeroshot": [F, F, F, F, T, F, F, F, T], "belief_qa_zeroshot": [F, F, F, T, F, T, F, F, F]},
    10: {"belief_mp_zeroshot": [T, T, F, F, T, F, F, F, T], "belief_qa_zeroshot": [T, F, F, T, F, T, F, F, F]},
    20: {"belief_mp_zeroshot": [T, T, T, F, T, F, F, F, T], "belief_qa_zeroshot": [T, T, T, F, F, F, F, F, F]},
}

# Hand values, κ = (p_o − p_e) / (1 − p_e), p_e = p_a·p_b + (1 − p_a)(1 − p_b), on the 4 facts of each side:
# step 0 trained: p_o 3/4, p_a 0, p_b 1/4: p_e 3/4, κ 0; both known 0
# step 0 held-out: p_o 2/4, p_a = p_b = 1/4: p_e 5/8, κ (1/2 − 5/8) / (3/8) = −1/3; both 0
# step 10 trained: p_o 2/4, p_a = p_b = 1/2: p_e 1/2, κ 0; both 1/4 (Aa)
# step 10 held-out: as at step 0
# step 20 trained: p_o 1, p_a = p_b = 3/4: p_e 5/8, κ 1; both 3/4
# step 20 held-out: p_o 3/4, p_a 1/4, p_b 0: p_e 3/4, κ 0; both 0
HAND = [  # (step, side, kappa, agreement, both known)
    (0, "trained", 0.0, 0.75, 0.0),
    (0, "held-out", -1 / 3, 0.5, 0.0),
    (10, "trained", 0.0, 0.5, 0.25),
    (10, "held-out", -1 / 3, 0.5, 0.0),
    (20, "trained", 1.0, 1.0, 0.75),
    (20, "held-out", 0.0, 0.75, 0.0),
]


def records(known: list[bool]) -> list[dict]:
    """One pair per fact, both templates answered alike (known under most templates = that answer)."""
    out = []
    for subject, ok in zip(SUBJECTS, known):
        rec = icl_record(f"P36_{subject}", ["Paris", "Paris"] if ok else ["Rome", "Rome"], [ok, ok], 0.5)
        out.append({**rec, "fact_key": key(subject).as_record()})
    return out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    for step, probes in KNOWN.items():
        write_run(
            root / "runs",
            f"{HOME}/series/checkpoint-{step}",
            {t: records(k) for t, k in probes.items()},
            {t: {} for t in probes},
            metadata={t: {"dataset": "sample"} for t in probes},
        )
    split = FactSplit(
        frozenset(key(s).text for s in TRAINED_FACTS), frozenset(key(s).text for s in HELD_FACTS), seed=7, share=0.5
    )
    build_report([root / "runs"], root / "report", split=split)
    return root / "report"


def test_agreement_between_probes_is_followed_across_checkpoints_per_side(report):
    rows = read_csv(report / "tables" / "training_0_split_agreement.csv")
    assert [(float(r["step"]), r["facts"]) for r in rows] == [(float(s), side) for s, side, *_ in HAND]
    for row, (_, _, kappa, agreement, both) in zip(rows, HAND):
        assert row["probes"] == "belief_mp_zeroshot / belief_qa_zeroshot"
        assert int(row["n facts"]) == 4  # the fact outside the split counts on neither side
        assert math.isclose(float(row["kappa"]), kappa, abs_tol=1e-4)
        assert math.isclose(float(row["agreement"]), agreement, abs_tol=1e-4)
        assert math.isclose(float(row["both known"]), both, abs_tol=1e-4)
    md = (report / "report.md").read_text()
    assert "Do the probes agree more as the facts are learnt?" in md
    assert "split seed 7, 4 trained and 4 held-out facts in the split" in md
    assert "### `pretrained=~/series/checkpoint-{step}`" in md and f"{HOME}/series" not in md
