"""MONITOR (Wang et al., 2024, "Assessing Factual Reliability of Large Language Model Knowledge").

Every quantity starts from *anchors*: the gold object's per-subword probabilities
``P(o_l | prompt, o_<l)``, l = 1..L_c, for one fact c.

* primary anchor ``p``: under the positive context, ``"{object}. " + base question``
  (Table 1, template 4);
* foreign anchors: under each of the R prompt frames without context (template 2),
  and under each of the M negative contexts ``"{negative}. " + base question``
  (template 5).

Per fact, anchors are arrays of the same length L_c; facts may differ in L_c.
A fact dataset is one relation (FKTC has 20): eq. 3 and every mean is taken over the facts of
one relation, and Table 4 reports the unweighted mean over relations (``*_over_relations``).
Pure numpy: arrays in, numbers out.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

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


def mean_anchor_probability(anchors: Sequence) -> float:
    """(1/K) sum_k (1/L_c) sum_l P_k(o_c)_l: the mean subword probability of K foreign anchors of one
    fact (the R frames, or the M negative contexts), the "probs" of Table 4 under those prompts."""
    if len(anchors) == 0:
        raise ValueError("at least one anchor is needed")
    return sum(mean_subword_probability(q) for q in anchors) / len(anchors)


def fact_quantities(primary, frames: Sequence, negatives: Sequence) -> dict[str, float]:
    """One fact's terms: ``pfd`` (eq. 1), ``ird`` (eq. 2), ``primary_prob`` = (1/L_c) sum_l
    P(o_c|s_c, r, i+)_l (eq. 3's denominator term), ``frame_prob`` and ``negative_prob``
    (``mean_anchor_probability`` of the R frames and of the M negative contexts)."""
    return {
        "pfd": prompt_framing_degree(primary, frames),
        "ird": interference_relevance_degree(primary, negatives),
        "primary_prob": mean_subword_probability(primary),
        "frame_prob": mean_anchor_probability(frames),
        "negative_prob": mean_anchor_probability(negatives),
    }


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


def monitor_score(
    pfd: Iterable[float],
    ird: Iterable[float],
    primary_probability: Iterable[float],
    alpha: Sequence[float] = DEFAULT_ALPHA,
) -> float:
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


def monitor_from_anchors(
    primaries: Sequence,
    frames: Sequence[Sequence],
    negatives: Sequence[Sequence],
    alpha: Sequence[float] = DEFAULT_ALPHA,
) -> float:
    """MONITOR (eq. 3) straight from each fact's anchors: per-fact PFD (eq. 1), IRD (eq. 2), then eq. 3."""
    pfd = [prompt_framing_degree(p, f) for p, f in zip(primaries, frames, strict=True)]
    ird = [interference_relevance_degree(p, n) for p, n in zip(primaries, negatives, strict=True)]
    return monitor_score(pfd, ird, [mean_subword_probability(p) for p in primaries], alpha)


def combination_accuracies(correct) -> np.ndarray:
    """Accuracy of every prompt combination k of one fact dataset: acc_k = (1/S) sum_c correct_ck, the
    means over facts (axis 0) of a 0/1 array of greedy answers containing the object.

    ``correct`` is (facts x frames): k = frame r_j alone (R accuracies); or (facts x frames x negatives):
    k = (r_j, i-_m), frame r_j behind negative interference m, the R x M combinations of section 4.3
    (an R x M array). Every fact of the dataset needs the same combinations (a rectangular array)."""
    try:
        c = np.asarray(correct, dtype=float)
    except ValueError:
        raise ValueError("every fact of a relation needs the same prompt combinations (frames x negatives)") from None
    if c.ndim not in (2, 3) or c.size == 0:
        raise ValueError(
            f"expected a non-empty (facts x frames) or (facts x frames x negatives) array, got shape {c.shape}"
        )
    return c.mean(axis=0)


def frame_accuracies(correct) -> np.ndarray:
    """Accuracy under each prompt frame j: acc_j = (1/S) sum_c correct_cj, the column means of a
    (facts x frames) 0/1 matrix of greedy answers containing the object (``combination_accuracies``)."""
    if np.ndim(correct) != 2:
        raise ValueError(f"expected a (facts x frames) matrix, got {np.ndim(correct)} dimensions")
    return combination_accuracies(correct)


def accuracy_summary(correct) -> dict[str, float]:
    """Average, maximum and minimum accuracy of one fact dataset over its prompt combinations
    (``combination_accuracies``): avg_k acc_k, max_k acc_k, min_k acc_k.

    On a (facts x frames x negatives) array this is section 4.3's average accuracy over the R x M
    combinations, avg = (1/(R M)) sum_j sum_m (1/S) sum_c correct_cjm, and its accuracy range
    [min, max] (Table 9 gives avg / max / min for one dataset); on (facts x frames), the same over the
    R frames without interference."""
    acc = combination_accuracies(correct)
    return {"avg": float(acc.mean()), "max": float(acc.max()), "min": float(acc.min())}


def mean_over_groups(values_by_group: Mapping[str, float]) -> float:
    """Unweighted mean over fact datasets (relations), as Table 4 averages the 20 datasets:
    (1/G) sum_g v_g, NaN groups left out; NaN when none is left."""
    vals = [v for v in values_by_group.values() if not np.isnan(v)]
    return float(np.mean(vals)) if vals else float("nan")


def group_by_relation(relations: Sequence[str], values: Sequence) -> dict[str, list]:
    """``{relation: [its facts' values]}``, relations in order of first appearance, facts in order."""
    if len(relations) != len(values):
        raise ValueError(f"{len(relations)} relation labels for {len(values)} facts")
    groups: dict[str, list] = {}
    for rel, v in zip(relations, values):
        groups.setdefault(rel, []).append(v)
    return groups


def relation_means(relations: Sequence[str], values: Sequence[float]) -> dict[str, float]:
    """Per relation g: (1/S_g) sum_{c in g} v_c, the mean of a per-fact quantity over g's S_g facts."""
    return {rel: sum(vs) / len(vs) for rel, vs in group_by_relation(relations, values).items()}


def mean_over_relations(relations: Sequence[str], values: Sequence[float]) -> float:
    """Table 4's average of a per-fact quantity (PFD, IRD, probs, 0/1 correctness):
    (1/G) sum_g (1/S_g) sum_{c in g} v_c, each relation scored alone, then unweighted."""
    return mean_over_groups(relation_means(relations, values))


def monitor_over_relations(
    relations: Sequence[str],
    pfd: Sequence[float],
    ird: Sequence[float],
    primary_probability: Sequence[float],
    alpha: Sequence[float] = DEFAULT_ALPHA,
) -> float:
    """MONITOR of Table 4: eq. 3 on each relation's facts, then the unweighted mean over relations,
    (1/G) sum_g [sum_{c in g} sqrt(a1 PFD_c^2 + a2 IRD_c^2 + a3 PFD_c IRD_c)
                 / sum_{c in g} (1/L_c) sum_l P(o_c|s_c,r,i+)_l]."""
    rows = group_by_relation(relations, list(zip(pfd, ird, primary_probability, strict=True)))
    return mean_over_groups(
        {
            rel: monitor_score([f[0] for f in fs], [f[1] for f in fs], [f[2] for f in fs], alpha)
            for rel, fs in rows.items()
        }
    )


def accuracy_over_relations(relations: Sequence[str], correct: Sequence, which: str) -> float:
    """Table 4's avg / max / min accuracy: per relation g, ``accuracy_summary`` of its 0/1 array (acc_k =
    (1/S_g) sum_{c in g} correct_ck per combination k, then avg_k / max_k / min_k); unweighted mean over
    relations. Each fact's ``correct`` is its R frames (1-d) or its R x M frame-interference grid (2-d)."""
    if which not in ("avg", "max", "min"):
        raise ValueError(f"which must be 'avg', 'max' or 'min', got {which!r}")
    groups = group_by_relation(relations, correct)
    return mean_over_groups({rel: accuracy_summary(rows)[which] for rel, rows in groups.items()})


def accuracy_across_relations(relations: Sequence[str], correct: Sequence, which: str) -> float:
    """The maximum or minimum, across fact datasets, of each relation's average accuracy avg_k acc_k
    (``accuracy_summary``): Table 4's caption read literally ("the average, maximum, and minimum accuracy
    across the 20 fact datasets"). ``correct`` as in ``accuracy_over_relations``."""
    if which not in ("max", "min"):
        raise ValueError(f"which must be 'max' or 'min', got {which!r}")
    per_relation = [accuracy_summary(rows)["avg"] for rows in group_by_relation(relations, correct).values()]
    return float(max(per_relation) if which == "max" else min(per_relation)) if per_relation else float("nan")


def frame_accuracy_over_relations(relations: Sequence[str], correct: Sequence[Sequence[int]], frame: int) -> float:
    """Accuracy under prompt frame j = ``frame``: acc_j = (1/S_g) sum_{c in g} correct_cj per relation g
    that has a frame j (P264 and P276 have 6 frames, the others 7), unweighted mean over those relations."""
    groups = group_by_relation(relations, correct)
    rows = {rel: [c for c in cs if len(c) > frame] for rel, cs in groups.items()}
    return mean_over_groups({rel: frame_accuracies(cs)[frame] for rel, cs in rows.items() if cs})


def bootstrap_stderr(items: Sequence, statistic: Callable[[list], float], iters: int = 200, seed: int = 0) -> float:
    """Standard error of ``statistic`` by the bootstrap: the sample standard deviation (ddof 1) of
    ``statistic`` over ``iters`` resamples of ``items`` with replacement (NaN resamples left out)."""
    pool = list(items)
    if len(pool) < 2:
        return float("nan")
    rng = np.random.default_rng(seed)
    found = []
    for _ in range(iters):
        idx = rng.integers(0, len(pool), len(pool))
        found.append(statistic([pool[i] for i in idx]))
    stats = np.asarray(found, dtype=float)
    stats = stats[~np.isnan(stats)]
    return float(stats.std(ddof=1)) if stats.size > 1 else float("nan")
