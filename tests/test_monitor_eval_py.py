"""MONITOR against its reference code, computation by computation: ``eval.py`` of Vicky-Wil/MONITOR at commit
654674a409ce2120eafe0b54f9886806e0a6ecf6 (the commit our FKTC copy comes from). docs/monitor.md, "The reference
eval.py, computation by computation", says for each whether ours equals it.

Every expected value is written out by hand from eval.py's lines, on hand-made per-subword probabilities: the
anchors eval.py reads from its beam search, here given, so that only the computations are compared.
"""

from __future__ import annotations

import math

import pytest

from belief_tasks.facts.matching import contains_answer, eval_py_exact
from belief_tasks.metrics import monitor as M
from belief_tasks.options import KnobError, parse_options
from belief_tasks.scoring import monitor as SC
from belief_tasks.tasks import monitor as T

# Fact 1 of a 7-frame relation: 2 subwords. |p - q| per subword, then mand = their mean (eval.py lines 22-25):
P1 = [0.9, 0.6]
F1 = [[0.5, 0.6], [0.9, 0.2], [0.7, 0.8], [0.1, 0.6], [0.9, 0.6], [0.3, 0.0], [0.8, 0.5]]
#     mand:  0.2        0.2         0.2         0.4         0.0         0.6         0.1      -> sum 1.7
N1 = [[0.4, 0.6], [0.9, 0.1], [0.0, 0.0], [0.9, 0.6], [0.6, 0.9]]
#     mand:  0.25       0.25        0.75        0.0         0.3                              -> sum 1.55
# Fact 2: 1 subword.
P2 = [0.5]
F2 = [[0.1], [0.2], [0.3], [0.4], [0.5], [0.6], [0.7]]  # mand 0.4, 0.3, 0.2, 0.1, 0, 0.1, 0.2 -> sum 1.3
N2 = [[0.5], [0.0], [1.0], [0.25], [0.75]]  # mand 0, 0.5, 0.5, 0.25, 0.25 -> sum 1.5

PFD1, IRD1, PFD2, IRD2 = 1.7 / 7, 1.55 / 5, 1.3 / 7, 1.5 / 5  # eval.py lines 256 and 245
THIRD = (1 / 3, 1 / 3, 1 / 3)


def eval_py_term(pfd: float, ird: float) -> float:
    """eval.py line 258: sqrt((IRD * IRD + PFD * PFD + IRD * PFD) / 3)."""
    return math.sqrt((ird * ird + pfd * pfd + ird * pfd) / 3)


def test_distance_is_eval_py_mand():
    """Lines 22-25: mand(P, Q) = sum |P - Q| / len(P), the mean over the primary anchor's subwords."""
    assert M.anchor_distance(P1, F1[0]) == pytest.approx((0.4 + 0.0) / 2)
    assert M.anchor_distance(P1, N1[2]) == pytest.approx((0.9 + 0.6) / 2)
    assert M.anchor_distance(P2, N2[3]) == pytest.approx(0.25)


def test_shorter_foreign_anchor_is_refused_not_zero_padded():
    """Lines 236-243 and 247-253 pad a foreign anchor that stopped early with zeros: mand([.9, .6], [.6, 0]) = 0.45.
    Ours scores every anchor teacher-forced on the object's L_c subwords, so no anchor is shorter; the metric refuses
    one rather than padding it."""
    assert M.anchor_distance(P1, [0.6, 0.0]) == pytest.approx((0.3 + 0.6) / 2)  # eval.py's padded value
    with pytest.raises(ValueError, match="1 subwords"):
        M.anchor_distance(P1, [0.6])


def test_pfd_equals_eval_py_on_seven_frames():
    """Lines 247-256: PFD = sum over the relation's prompts of mand / 7; with R = 7 frames that is eq. 1's 1/R."""
    assert M.prompt_framing_degree(P1, F1) == pytest.approx(1.7 / 7)
    assert M.prompt_framing_degree(P2, F2) == pytest.approx(1.3 / 7)


def test_pfd_on_six_frames_follows_the_paper_not_eval_py():
    """Line 256 divides by 7 on every relation; P264 and P276 have 6 frames, so eval.py's PFD there is 6/7 of eq. 1's
    (1/R). The paper stays: ours is the mean over the R = 6 frames."""
    six = F1[:6]  # mand sum 0.2 + 0.2 + 0.2 + 0.4 + 0 + 0.6 = 1.6
    ours = M.prompt_framing_degree(P1, six)
    assert ours == pytest.approx(1.6 / 6)
    assert ours * 6 / 7 == pytest.approx(1.6 / 7)  # eval.py's value


def test_ird_equals_eval_py():
    """Lines 179-245: mand of the primary (res_neg[0]) against each of the 5 negative contexts, sum / 5 (line 245).
    FKTC gives every fact 5 negatives (``taxonomy``), so that is eq. 2's 1/M. (As published, line 244 calls the
    undefined ``mind`` on ``mind_negative``; read as ``mand`` on ``mand_negative``, which line 245 sums.)"""
    assert M.interference_relevance_degree(P1, N1) == pytest.approx(1.55 / 5)
    assert M.interference_relevance_degree(P2, N2) == pytest.approx(1.5 / 5)


def test_monitor_equals_eval_py_with_alpha_one_third():
    """Lines 125, 258, 272, 283: per counted fact sqrt((IRD^2 + PFD^2 + IRD PFD) / 3), summed, divided by
    ACC_probs[0][1], the sum of the primary anchors' mean subword probabilities. That is eq. 3 with a1 = a2 = a3 = 1/3;
    the paper says 0.33 (section 4.3), our default, which gives sqrt(0.99) times eval.py's value."""
    reference = (eval_py_term(PFD1, IRD1) + eval_py_term(PFD2, IRD2)) / ((0.9 + 0.6) / 2 + 0.5)
    # (sqrt(0.2303653 / 3) + sqrt(0.1802041 / 3)) / 1.25 = (0.277107 + 0.245088) / 1.25
    assert reference == pytest.approx(0.417756, abs=1e-6)
    ours = M.monitor_from_anchors([P1, P2], [F1, F2], [N1, N2], alpha=THIRD)
    assert ours == pytest.approx(reference, rel=1e-12)
    assert M.monitor_from_anchors([P1, P2], [F1, F2], [N1, N2]) == pytest.approx(math.sqrt(0.99) * reference, rel=1e-12)
    # the knob takes 1/3 as the decimal a user types
    typed = parse_options(T.OPTIONS, {"monitor_alpha": "0.3333333333333333,0.3333333333333333,0.3333333333333333"})
    assert typed.monitor_alpha == THIRD


def _record(primary, frames, negatives, answer, obj="Paris", **kw):
    """A MONITOR record of one fact whose positive-context greedy answer is ``answer``, graded by ``monitor_match``."""
    match = kw.pop("match", "contains")
    right = eval_py_exact(answer, obj) if match == "exact" else contains_answer(answer, [obj])
    return {
        "relation": "P1376",
        "primary": primary,
        "frames": frames,
        "negatives": negatives,
        "correct": [0] * len(frames),
        "positive_answer": answer,
        "positive_correct": int(right),
        "alpha": list(THIRD),
        "match": match,
        **kw,
    }


def test_filter_keeps_facts_whose_positive_answer_is_exactly_the_object():
    """Lines 88-96: a fact counts only when its positive-context answer, punctuation deleted, equals the object; every
    later computation (PFD, IRD, MONITOR, the probabilities) runs inside that ``if``. Ours: ``only_correct_primary``
    with ``monitor_match: exact``. Fact 3 answers "Paris, France": contained, not exact."""
    p3, f3, n3 = [0.2], [[0.9]] * 7, [[0.9]] * 5  # far from its anchors: it would move every number
    reference = (eval_py_term(PFD1, IRD1) + eval_py_term(PFD2, IRD2)) / (0.75 + 0.5)  # facts 1 and 2 counted
    records = [
        _record(P1, F1, N1, "Paris.", match="exact", only_correct_primary=True),
        _record(P2, F2, N2, "Paris!", match="exact", only_correct_primary=True),
        _record(p3, f3, n3, "Paris, France", match="exact", only_correct_primary=True),
    ]
    assert SC.agg_monitor(records) == pytest.approx(reference, rel=1e-12)
    # eval.py writes each counted fact's PFD and IRD (lines 260-265); ours is their mean
    assert SC.agg_pfd(records) == pytest.approx((PFD1 + PFD2) / 2)
    assert SC.agg_ird(records) == pytest.approx((IRD1 + IRD2) / 2)
    # "probs" of Table 4: ACC_probs[0][1] / count (lines 125, 277), the mean primary probability of counted facts
    assert SC.agg_primary_prob(records) == pytest.approx((0.75 + 0.5) / 2)
    # our default rule (containment) keeps fact 3, and so do we without the filter
    contains = [dict(r, positive_correct=1, match="contains") for r in records]
    assert SC.agg_monitor(contains) != pytest.approx(reference)
    assert SC.agg_monitor([dict(r, only_correct_primary=False) for r in records]) == SC.agg_monitor(contains)


def test_eval_py_exact_match():
    """Lines 88-96: the answer stripped, each of '.</s>', '.\\n', '.', ';', '!', ',', '?', '\\n', '</s>', '<pad>'
    deleted wherever it occurs (line 54), then ``M == ans`` with M the object stripped: case-sensitive, no aliases,
    no second strip; the object keeps its punctuation."""
    assert eval_py_exact(" Paris. ", "Paris") and eval_py_exact("Paris?!", "Paris") and eval_py_exact("Par,is", "Paris")
    assert not eval_py_exact("Paris, France", "Paris") and contains_answer("Paris, France", ["Paris"])
    assert not eval_py_exact("paris", "Paris") and contains_answer("paris", ["Paris"])
    assert not eval_py_exact("Paris .", "Paris")  # "Paris " after deleting "."
    assert eval_py_exact("Paris\n", "Paris") and not eval_py_exact("Paris\nFrance", "Paris")  # "ParisFrance"
    assert not eval_py_exact("Washington, D.C.", "Washington, D.C.")  # "Washington DC" against the object as it is
    assert eval_py_exact("Washington, D.C.", "Washington DC")


def test_monitor_match_knob_grades_the_greedy_answers():
    """``monitor_match: exact`` grades the positive-context, frame and R x M answers with eval.py's test (lines 96,
    173, 224 use the same ``M == ans``); ``contains`` (default) with containment and aliases."""
    doc = {"fact_id": "P36_1", "object": "Paris", "accepted": ["Paris", "City of Light"]}
    answered = [{"key": "positive", "kind": "positive"}, {"key": "r1", "kind": "frame"}, {"key": "r2", "kind": "frame"}]
    grid = [{"frame": "r1", "negative": "Lyon"}, {"frame": "r2", "negative": "Lyon"}]
    generated = [" Paris.\n\nQuestion", " the City of Light", " paris", " Paris, France", "Paris"]
    exact = T.answer_fields(doc, generated, answered, grid, ["r1", "r2"], "exact")
    assert (exact["positive_correct"], exact["correct"], exact["interference_correct"]) == (1, [0, 0], [[0], [1]])
    contains = T.answer_fields(doc, generated, answered, grid, ["r1", "r2"])
    graded = (contains["positive_correct"], contains["correct"], contains["interference_correct"])
    assert graded == (1, [1, 1], [[1], [1]])
    assert parse_options(T.OPTIONS, {}).monitor_match == "contains"
    with pytest.raises(KnobError, match="monitor_match"):
        parse_options(T.OPTIONS, {"monitor_match": "fuzzy"})
    with pytest.raises(KnobError, match="monitor_match"):  # no greedy answers to grade
        T.check_options(parse_options(T.OPTIONS, {"monitor_accuracy": "none", "monitor_match": "exact"}))


def test_accuracies_are_not_conditioned_on_the_filter():
    """eval.py's accuracies (lines 126, 173-177, 224-232, 276) count only facts that passed the filter and divide by
    their number: ACC[i][0] / count. The paper's accuracy is over all S facts, so ours stays unconditioned under
    ``only_correct_primary``; eval.py's value is our frame accuracy on the facts whose positive answer is right."""
    records = [
        dict(_record(P2, F2, N2, a, match="exact", only_correct_primary=True), correct=c)
        for a, c in (("Paris", [1] * 7), ("Paris", [0] * 7), ("Lyon", [1] * 7))
    ]
    assert SC.agg_acc_frame_0(records) == pytest.approx(2 / 3)  # ours: over all 3 facts
    counted = [r for r in records if r["positive_correct"]]
    assert SC.agg_acc_frame_0(counted) == pytest.approx(1 / 2)  # eval.py's ACC[0][0] / count
