"""MONITOR's metrics on a budgeted run (``belief_tasks.metrics.monitor``; unit: one fact with all its anchors).

Per fact: whether the anchor metrics score it (``scored``: all facts, or under ``only_correct_primary``
those whose positive-context answer is right), its PFD (eq. 1), IRD (eq. 2), mean anchor probabilities
and eq. 3's numerator term sqrt(a1 PFD^2 + a2 IRD^2 + a3 PFD IRD), each times ``scored``; its greedy
answers' correctness per frame (``frame<j>``, and ``has<j>`` where the relation has frame j) and under
the positive context. Table 4 scores each relation alone and averages relations without weights, so
every statistic is a mean over relations of per-relation ratios of totals (or, for the accuracy
extremes, their maximum or minimum).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from belief_tasks.metrics.budgeted import nanmean, ratio, relation_mean
from belief_tasks.metrics.intervals import Totals, Units, selecting

ANCHOR_MEANS = ("pfd", "ird", "primary_prob", "frame_prob", "negative_prob")


def units(fact_ids: Sequence[str], relations: Sequence[str], quantities: Sequence[dict], correct: Sequence[Sequence[int]],
          positive_correct: Sequence[int], scored: Sequence[bool], alpha: Sequence[float], frames: int) -> Units:
    """Per-fact columns: ``quantities`` as ``metrics.monitor.fact_quantities`` gives them, ``correct`` the
    per-frame 0/1 answers (a fact's relation may have fewer than ``frames`` frames)."""
    s = np.asarray(scored, dtype=float)
    q = {k: np.array([x[k] for x in quantities], dtype=float) for k in ANCHOR_MEANS}
    a1, a2, a3 = (float(a) for a in alpha)
    numerator = np.sqrt(a1 * q["pfd"] ** 2 + a2 * q["ird"] ** 2 + a3 * q["pfd"] * q["ird"])
    columns = {"one": np.ones(len(s)), "scored": s, "monitor_numerator": numerator * s,
               **{k: q[k] * s for k in ANCHOR_MEANS}, "positive_correct": np.asarray(positive_correct, dtype=float)}
    for j in range(frames):
        columns[f"has{j}"] = [len(c) > j for c in correct]
        columns[f"frame{j}"] = [c[j] if len(c) > j else 0 for c in correct]
    return Units.of(list(fact_ids), list(relations), columns)


def monitor(T: Totals) -> np.ndarray:
    """Eq. 3 per relation (its scored facts' numerators over their primary probabilities), mean over relations."""
    return nanmean(ratio(T["monitor_numerator"], np.where(T["scored"] > 0, T["primary_prob"], 0.0)))


def _frame_accuracies(T: Totals) -> np.ndarray:
    """(..., H, frames) accuracy under each frame per relation; NaN where the relation lacks the frame."""
    return ratio(T.block("frame"), T.block("has"))


def _per_relation(how: str):
    """Table 4's avg / max / min over frames per relation, averaged over relations."""
    reduce = {"avg": nanmean, "max": lambda a: np.nanmax(np.where(np.isfinite(a), a, -np.inf), -1),
              "min": lambda a: np.nanmin(np.where(np.isfinite(a), a, np.inf), -1)}[how]

    def stat(T: Totals) -> np.ndarray:
        return nanmean(reduce(_frame_accuracies(T)))

    return stat if how == "avg" else selecting(stat)


def _across_relations(how: str):
    """Table 4's max / min across relations of each relation's average accuracy."""

    def stat(T: Totals) -> np.ndarray:
        avg = nanmean(_frame_accuracies(T))
        return np.max(avg, -1) if how == "max" else np.min(avg, -1)

    return selecting(stat)


def _frame(j: int):
    def stat(T: Totals) -> np.ndarray:
        if f"has{j}" not in T.columns:
            return np.full(T.values.shape[:-2], np.nan)
        return nanmean(ratio(T[f"frame{j}"], T[f"has{j}"]))

    return stat


STATISTICS = {
    "monitor": monitor,
    **{k: relation_mean(k, "scored") for k in ANCHOR_MEANS},
    "acc_avg": _per_relation("avg"),
    "acc_max": _per_relation("max"),
    "acc_min": _per_relation("min"),
    "acc_positive": relation_mean("positive_correct", "one"),
    "acc_relation_max": _across_relations("max"),
    "acc_relation_min": _across_relations("min"),
    **{f"acc_frame_{j}": _frame(j) for j in range(7)},
}
