"""MONITOR (Wang et al., 2024, "Assessing Factual Reliability of Large Language Model Knowledge").

Every quantity starts from *anchors*: the gold object's per-subword probabilities
``P(o_l | prompt, o_<l)``, l = 1..L_c, for one fact c.

* primary anchor ``p``: under the positive context, ``"{object}. " + base question``
  (Table 1, template 4);
* foreign anchors: under each of the R prompt frames without context (template 2),
  and under each of the M negative contexts ``"{negative}. " + base question``
  (template 5).

Per fact, anchors are arrays of the same length L_c; facts may differ in L_c.
Pure numpy: arrays in, numbers out.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

#: the paper's equal-contribution setting (section 4.3)
DEFAULT_ALPHA = (0.33, 0.33, 0.33)


def _anchor(p) -> np.ndarray:
    a = np.asarray(p, dtype=float)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"an anchor is a non-empty 1-d array of per-subword probabilities, got shape {a.shape}")
    if np.any(a < 0) or np.any(a > 1) or not np.all(np.isfinite(a)):
        raise ValueError("anchor probabilities must lie in [0, 1]")
    return a


def _foreign(primary: np.ndarray, foreign: Sequence) -> np.ndarray:
    rows = [_anchor(q) for q in foreign]
    if not rows:
        raise ValueError("at least one foreign anchor is needed")
    for q in rows:
        if q.shape != primary.shape:
            raise ValueError(f"foreign anchor has {q.size} subwords, the primary anchor {primary.size}")
    return np.stack(rows)


def mean_subword_probability(anchor) -> float:
    """(1/L_c) sum_l P(o_c | s_c, r, i)_l: an anchor's mean per-subword probability (eq. 3's denominator term)."""
    return float(_anchor(anchor).mean())


def anchor_distance(primary, foreign) -> float:
    """Mean per-subword distance between two anchors: (1/L_c) sum_l |p_l - q_l|."""
    p = _anchor(primary)
    return float(np.abs(p - _foreign(p, [foreign])[0]).mean())


def prompt_framing_degree(primary, frames: Sequence) -> float:
    """PFD, eq. 1, for one fact c.

    PFD = (1/R) sum_{j=1..R} (1/L_c) sum_{l=1..L_c} |P(o_c|s_c, r, i+)_l - P(o_c|s_c, r_j)_l|

    ``primary``: the primary anchor (L_c probabilities); ``frames``: the R foreign
    anchors under the prompt frames without context, each of length L_c.
    """
    p = _anchor(primary)
    return float(np.abs(_foreign(p, frames) - p).mean(axis=1).mean())


def interference_relevance_degree(primary, negatives: Sequence) -> float:
    """IRD, eq. 2, for one fact c.

    IRD = (1/M) sum_{m=1..M} (1/L_c) sum_{l=1..L_c} |P(o_c|s_c, r, i+)_l - P(o_c|s_c, r, i-_m)_l|

    ``negatives``: the M foreign anchors under the negative contexts, each of length L_c.
    """
    p = _anchor(primary)
    return float(np.abs(_foreign(p, negatives) - p).mean(axis=1).mean())


def monitor_score(pfd: Iterable[float], ird: Iterable[float], primary_probability: Iterable[float],
                  alpha: Sequence[float] = DEFAULT_ALPHA) -> float:
    """MONITOR, eq. 3, over the S facts of a fact dataset (lower is better).

    MONITOR = sum_c sqrt(a1 PFD_c^2 + a2 IRD_c^2 + a3 PFD_c IRD_c)
              / sum_c (1/L_c) sum_l P(o_c|s_c, r, i+)_l

    ``pfd``, ``ird``: per-fact PFD and IRD; ``primary_probability``: per-fact mean
    subword probability of the primary anchor; ``alpha``: (a1, a2, a3).
    """
    pfd, ird, prob = (np.asarray(list(x), dtype=float) for x in (pfd, ird, primary_probability))
    if not (pfd.shape == ird.shape == prob.shape) or pfd.ndim != 1 or pfd.size == 0:
        raise ValueError("pfd, ird and primary_probability need one value per fact, for at least one fact")
    a1, a2, a3 = (float(a) for a in alpha)
    denominator = prob.sum()
    if denominator <= 0:
        return float("nan")  # no probability mass on any primary anchor: undefined
    return float(np.sqrt(a1 * pfd**2 + a2 * ird**2 + a3 * pfd * ird).sum() / denominator)


def monitor_from_anchors(primaries: Sequence, frames: Sequence[Sequence], negatives: Sequence[Sequence],
                         alpha: Sequence[float] = DEFAULT_ALPHA) -> float:
    """MONITOR (eq. 3) straight from each fact's anchors: per-fact PFD (eq. 1), IRD (eq. 2), then eq. 3."""
    pfd = [prompt_framing_degree(p, f) for p, f in zip(primaries, frames, strict=True)]
    ird = [interference_relevance_degree(p, n) for p, n in zip(primaries, negatives, strict=True)]
    return monitor_score(pfd, ird, [mean_subword_probability(p) for p in primaries], alpha)


def frame_accuracies(correct) -> np.ndarray:
    """Accuracy under each prompt frame: column means of a (facts x frames) 0/1 matrix."""
    c = np.asarray(correct, dtype=float)
    if c.ndim != 2 or c.size == 0:
        raise ValueError(f"expected a non-empty (facts x frames) matrix, got shape {c.shape}")
    return c.mean(axis=0)


def accuracy_summary(correct) -> dict[str, float]:
    """Table 4's companions: average, maximum and minimum of the per-frame accuracies."""
    acc = frame_accuracies(correct)
    return {"avg": float(acc.mean()), "max": float(acc.max()), "min": float(acc.min())}


def mean_over_groups(values_by_group: Mapping[str, float]) -> float:
    """Unweighted mean over fact datasets (relations), as Table 4 averages the 20 datasets."""
    vals = [v for v in values_by_group.values() if not np.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")


def bootstrap_stderr(items: Sequence, statistic, iters: int = 200, seed: int = 0) -> float:
    """Standard deviation of ``statistic`` over ``iters`` resamples (with replacement) of ``items``."""
    items = list(items)
    if len(items) < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    stats = []
    for _ in range(iters):
        idx = rng.integers(0, len(items), len(items))
        stats.append(statistic([items[i] for i in idx]))
    stats = np.asarray(stats, dtype=float)
    stats = stats[~np.isnan(stats)]
    return float(stats.std(ddof=1)) if stats.size > 1 else float("nan")
