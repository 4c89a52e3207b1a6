"""MONITOR's metrics on a budgeted run (``belief_tasks.metrics.monitor``; unit: one fact with all its anchors).

Per fact: whether the anchor metrics score it (``scored``: all facts, or under ``only_correct_primary``
those whose positive-context answer is right), its PFD (eq. 1), IRD (eq. 2), mean anchor probabilities
and eq. 3's numerator term sqrt(a1 PFD^2 + a2 IRD^2 + a3 PFD IRD), each times ``scored``; its greedy
answers' correctness per frame (``frame<j>``, and ``has<j>`` where the relation has frame j) and under
the positive context; with ``monitor_accuracy: paper`` its R x M frame x negative-interference answers
(``grid<k>``, k = j * M + m, and ``ingrid<k>`` where the fact has combination k); the requests and tokens
it cost (``cost_*``). Table 4 scores each relation alone and averages relations without weights, so
every accuracy is a mean over relations of per-relation ratios of totals (or, for the accuracy
extremes, their maximum or minimum); a cost is the total over every fact of the run.

Which metric each statistic is: ``belief_tasks.scoring.monitor.METRICS``. Accuracies and probabilities are
shares: their intervals stay inside [0, 1].
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from belief_tasks.metrics.budgeted import nanmean, ratio, relation_mean, total
from belief_tasks.metrics.intervals import Totals, Units, selecting, share

ANCHOR_MEANS = ("pfd", "ird", "primary_prob", "frame_prob", "negative_prob")
#: request groups (MONITOR's anchors, the R + 1 answers, the R x M answers) x what is counted
COSTS = tuple(f"cost_{group}_{unit}" for group in ("anchor", "answer", "paper") for unit in ("requests", "tokens"))


def units(
    fact_ids: Sequence[str],
    relations: Sequence[str],
    quantities: Sequence[dict],
    correct: Sequence[Sequence[int]],
    positive_correct: Sequence[int],
    scored: Sequence[bool],
    alpha: Sequence[float],
    frames: int,
    grids: Sequence[Sequence[Sequence[int]]] | None = None,
    costs: Mapping[str, Sequence[float]] | None = None,
) -> Units:
    """Per-fact columns: ``quantities`` as ``metrics.monitor.fact_quantities`` gives them, ``correct`` the
    per-frame 0/1 answers (a fact's relation may have fewer than ``frames`` frames); ``grids`` each fact's
    R x M 0/1 frame-interference answers ([] without them), ``costs`` per-fact counts by ``COSTS`` name."""
    s = np.asarray(scored, dtype=float)
    q = {k: np.array([x[k] for x in quantities], dtype=float) for k in ANCHOR_MEANS}
    a1, a2, a3 = (float(a) for a in alpha)
    numerator = np.sqrt(a1 * q["pfd"] ** 2 + a2 * q["ird"] ** 2 + a3 * q["pfd"] * q["ird"])
    columns = {
        "one": np.ones(len(s)),
        "scored": s,
        "monitor_numerator": numerator * s,
        **{k: q[k] * s for k in ANCHOR_MEANS},
        "positive_correct": np.asarray(positive_correct, dtype=float),
    }
    for j in range(frames):
        columns[f"has{j}"] = [len(c) > j for c in correct]
        columns[f"frame{j}"] = [c[j] if len(c) > j else 0 for c in correct]
    columns.update(_grid_columns(grids or [[] for _ in s], frames))
    columns.update(costs or {})
    return Units.of(list(fact_ids), list(relations), columns)


def _grid_columns(grids: Sequence[Sequence[Sequence[int]]], frames: int) -> dict[str, list]:
    """``grid<k>`` / ``ingrid<k>`` for combination k = j * M + m (frame j behind negative m), M the most
    negatives of any fact; no columns when no fact has a grid (a run without ``monitor_accuracy: paper``)."""
    stride = max((len(row) for grid in grids for row in grid), default=0)
    columns: dict[str, list] = {}
    for j in range(frames if stride else 0):
        for m in range(stride):
            cells = [grid[j][m] if len(grid) > j and len(grid[j]) > m else None for grid in grids]
            columns[f"ingrid{j * stride + m}"] = [c is not None for c in cells]
            columns[f"grid{j * stride + m}"] = [c or 0 for c in cells]
    return columns


def monitor(T: Totals) -> np.ndarray:
    """Eq. 3 per relation (its scored facts' numerators over their primary probabilities), mean over relations."""
    return nanmean(ratio(T["monitor_numerator"], np.where(T["scored"] > 0, T["primary_prob"], 0.0)))


def _accuracies(T: Totals, cell: str, present: str) -> np.ndarray:
    """(..., H, combinations) accuracy under each combination per relation (a frame, or a frame behind a
    negative context); NaN where the relation lacks the combination."""
    return ratio(T.block(cell), T.block(present))


def _extreme(values: np.ndarray, how: str) -> np.ndarray:
    """max / min over the last axis of the finite values; NaN where there is none."""
    fill = -np.inf if how == "max" else np.inf
    out = (np.max if how == "max" else np.min)(np.where(np.isfinite(values), values, fill), -1)
    return np.where(np.isfinite(out), out, np.nan)


def anchor_mean(quantity: str):
    """The mean over relations of a scored fact's ``quantity`` (an ``ANCHOR_MEANS`` name: PFD, IRD or a mean
    anchor probability, the last a share)."""
    if quantity not in ANCHOR_MEANS:
        raise ValueError(f"no per-fact column {quantity!r} (anchor means: {ANCHOR_MEANS})")
    stat = relation_mean(quantity, "scored")
    return share(stat) if quantity.endswith("_prob") else stat


#: the mean over relations of the share of facts answered right under the positive context
positive_accuracy = share(relation_mean("positive_correct", "one"))


def per_relation(how: str, cell: str = "frame", present: str = "has"):
    """Table 4's avg / max / min over a relation's combinations (its frames; or, section 4.3, its R x M
    frame-interference pairs), averaged over relations."""

    def stat(T: Totals) -> np.ndarray:
        acc = _accuracies(T, cell, present)
        if acc.shape[-1] == 0:  # no combination at all: a run without these answers
            return np.full(acc.shape[:-2], np.nan)
        return nanmean(nanmean(acc) if how == "avg" else _extreme(acc, how))

    return share(stat if how == "avg" else selecting(stat))


def across_relations(how: str, cell: str = "frame", present: str = "has"):
    """The max / min across relations of each relation's average accuracy over its combinations."""

    def stat(T: Totals) -> np.ndarray:
        acc = _accuracies(T, cell, present)
        if acc.shape[-1] == 0:
            return np.full(acc.shape[:-2], np.nan)
        return _extreme(nanmean(acc), how)

    return share(selecting(stat))


def frame_accuracy(j: int):
    """The mean over the relations with a frame j of their accuracy under it; NaN without frame j's column."""

    def stat(T: Totals) -> np.ndarray:
        if f"has{j}" not in T.columns:
            return np.full(T.values.shape[:-2], np.nan)
        return nanmean(ratio(T[f"frame{j}"], T[f"has{j}"]))

    return share(stat)


def cost(name: str):
    """The run's total of a ``COSTS`` count (requests or tokens of a request group)."""
    if name not in COSTS:
        raise ValueError(f"no per-fact count {name!r} (costs: {COSTS})")
    return total(name)
