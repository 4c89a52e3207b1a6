"""BEAR metrics (Wiland et al., 2024, sections 3 and 5): arrays in, numbers out.

One *instance* is a (fact, template) pair: the log-likelihood of every answer option,
the index of its correct option(s), and ids such as its template index, relation or
domains. ``belief_tasks.scoring.bear`` turns the harness's records into these arrays.

Ranking follows lm-pub-quiz 0.3.3 exactly: options sorted by score, descending,
with a stable sort, so a tie goes to the option listed first in the answer space
(``Accuracy`` takes ``scores.index(max(scores))``; ``PrecisionAtK`` a stable sort).

Equations:

* log p(a_i | t) ~ log p(a_i, t) = sum_j log p(w_j | w_<j)                 (eq. 1)
* P@k = 1 if the ground truth is among the top k options, else 0           (eq. 2)
* BEAR score = mean over templates of the mean P@1 of their instances      (section 3.2, Table 3)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

import numpy as np

from belief_tasks.metrics.stats import mean_stderr

REDUCTIONS = ("sum", "mean")


def reduce_scores(ll: Sequence[float], n_tokens: Sequence[int] | None = None, reduction: str = "sum") -> np.ndarray:
    """Statement scores from summed token log-likelihoods.

    ``sum`` is eq. 1, log p(a_i, t) = sum_j log p(w_j | w_<j); ``mean`` divides by the
    number of scored tokens (the paper's "mean reduction" ablation, section 5.1.1).
    """
    summed = np.asarray(ll, dtype=float)
    if reduction == "sum":
        return summed
    if reduction == "mean":
        if n_tokens is None:
            raise ValueError("the mean reduction needs the number of scored tokens per option (n_tokens)")
        return summed / np.maximum(np.asarray(n_tokens, dtype=float), 1.0)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def ranking(scores: Sequence[float]) -> np.ndarray:
    """Option indices from best to worst (section 3.1, "Ranking the results"); ties keep
    answer-space order (lm-pub-quiz's stable sort)."""
    return np.argsort(-np.asarray(scores, dtype=float), kind="stable")


def gold_indices(gold: int | Iterable[int]) -> list[int]:
    """The correct option indices of an instance: one index, or several (a 1:N fact of the bundled sample)."""
    if isinstance(gold, Iterable):
        return [int(g) for g in gold]
    return [int(gold)]


def gold_rank(scores: Sequence[float], gold: int | Iterable[int]) -> int:
    """0-based rank of the best-ranked correct option (BEAR has exactly one); P@k of eq. 2 is ``rank < k``."""
    gold_set = set(gold_indices(gold))
    for r, idx in enumerate(ranking(scores)):
        if int(idx) in gold_set:
            return r
    raise ValueError(f"no gold index {sorted(gold_set)} among {len(scores)} options")


def top_k_share(ranks: Sequence[int], k: int = 1) -> float:
    """The share of instances whose ground truth is among their top k options: mean P@k, eq. 2 (P@k = 1 if
    it is, else 0; the paper's "precision at k").

    ``ranks``: the 0-based rank of each instance's correct option. k=1 over every
    (instance, template) pair is the pooled BEAR score.
    """
    found = np.asarray(ranks)
    if found.size == 0:
        return float("nan")
    return float(np.mean(found < k))


def template_scores(ranks: Sequence[int], template_index: Sequence[int]) -> dict[int, float]:
    """The BEAR score (mean P@1, eq. 2) of each template index, over every relation (Table 3's
    per-template runs). ``ranks[i]`` and ``template_index[i]`` describe one (instance, template)."""
    groups: dict[int, list[int]] = defaultdict(list)
    for rank, t in zip(ranks, template_index):
        groups[int(t)].append(int(rank))
    return {t: top_k_share(groups[t], 1) for t in sorted(groups)}


def bear_score(ranks: Sequence[int], template_index: Sequence[int]) -> float:
    """The paper's BEAR score: P@1 of each template (eq. 2, section 3.2), averaged over templates (Table 3)."""
    scores = list(template_scores(ranks, template_index).values())
    return float(np.mean(scores)) if scores else float("nan")


def bear_score_stderr(ranks: Sequence[int], template_index: Sequence[int]) -> float:
    """Table 3's "±": standard error of the per-template BEAR scores (eq. 2) across templates."""
    return mean_stderr(list(template_scores(ranks, template_index).values()))


def accuracy_by(ranks: Sequence[int], groups: Sequence[str | Sequence[str]]) -> dict[str, float]:
    """P@1 (eq. 2) per group. ``groups[i]``: the group of instance i (a relation id), or a list of
    groups it counts in each of (its domains).

    Pooled over the group's instances, which equals lm-pub-quiz's support-weighted
    accumulation over relations.
    """
    pooled: dict[str, list[int]] = defaultdict(list)
    for rank, names in zip(ranks, groups):
        for name in names if isinstance(names, (list, tuple)) else [names]:
            pooled[str(name)].append(int(rank))
    return {g: top_k_share(v, 1) for g, v in sorted(pooled.items())}


# --------------------------------------------------------------------------- confidence (lm-pub-quiz 0.3.3)
# lm-pub-quiz's ``lm_pub_quiz/metrics/confidence.py`` reports, per relation, statistics of the softmax
# over each instance's answer-space scores. Same definitions here, over the same (instance, template)
# rows: one row per template of each fact, the relation's rows together.

#: the per-relation statistics lm-pub-quiz 0.3.3 reports for all / correct / incorrect instances
CONFIDENCE_SUBSETS = ("all", "correct", "incorrect")


def softmax(scores) -> np.ndarray:
    """The answer-space softmax of an instance: p_i = exp(s_i) / sum_k exp(s_k) over its option scores s
    (eq. 1's log-likelihoods, or their mean reduction); row by row for (instances x options). Computed as
    exp(s_i - max s) / sum_k exp(s_k - max s), the same numbers without lm-pub-quiz's 0 / 0 = NaN when every
    score of an instance is below about -745."""
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def gold_targets(n_options: int, golds: Sequence) -> np.ndarray:
    """The target distribution y_n of each instance n: y_ni = 1/|G_n| for each correct option i in G_n,
    else 0 (lm-pub-quiz's one-hot when |G_n| = 1, as in BEAR; the bundled sample's 1:N facts may have several)."""
    y = np.zeros((len(golds), n_options))
    for n, gold in enumerate(golds):
        idx = sorted(set(gold_indices(gold)))
        y[n, idx] = 1.0 / len(idx)
    return y


def uncertainty_normaliser(golds: Sequence) -> float:
    """log2 U, U = the number of distinct correct option indices among a relation's instances: lm-pub-quiz
    0.3.3 divides each entropy by it (``np.emath.logn(2, len(np.unique(answer_idx)))``). It equals the
    uniform distribution's entropy log2 K when every one of the K options is the answer of some instance,
    and is smaller on a subset of instances (``max_facts_per_relation``, ``--limit``). NaN for U < 2
    (lm-pub-quiz divides by 0 there)."""
    distinct = {g for gold in golds for g in gold_indices(gold)}
    return float(np.log2(len(distinct))) if len(distinct) > 1 else float("nan")


def instance_confidences(scores: Sequence[Sequence[float]], golds: Sequence) -> dict[str, np.ndarray]:
    """Per-instance terms of one relation's n (instance, template) rows, each with the K option scores s_n
    of the relation's answer space and its correct options G_n; p_n = ``softmax(s_n)`` sorted as
    p_n(1) >= p_n(2) >= ...:

    * ``probs``: p_n (n x K);
    * ``correct``: 1 if the top-scoring option (the first of tied ones) is correct (lm-pub-quiz:
      ``answer_idx == argmax(pll_scores)``);
    * ``confidence`` = p_n(1), the largest probability (lm-pub-quiz's ``confidence_score``);
    * ``margin`` = p_n(1) - p_n(2), the gap to the runner-up (``margin_of_confidence``; NaN with one option);
    * ``entropy`` = H(p_n) = -sum_i p_ni log2 p_ni in bits, 0 log 0 = 0 (``scipy.stats.entropy``, base 2);
    * ``uncertainty`` = H(p_n) / log2 U (``uncertainty_normaliser`` over these rows; ``uncertainty_score``);
    * ``brier`` = (1/K) sum_i (p_ni - y_ni)^2, y_n = ``gold_targets`` (``brier_score``).
    """
    from scipy import stats

    try:
        s = np.asarray(scores, dtype=float)
    except ValueError:
        raise ValueError("every instance of a relation needs one score per option of its answer space") from None
    if s.ndim != 2 or s.shape[0] != len(golds) or s.size == 0:
        raise ValueError(f"expected (instances x options) scores for {len(golds)} instances, got shape {s.shape}")
    p = softmax(s)
    top = -np.sort(-p, axis=1)
    y = gold_targets(s.shape[1], golds)
    entropy = stats.entropy(p, base=2, axis=1)
    return {
        "probs": p,
        "correct": (y[np.arange(len(s)), np.argmax(s, axis=1)] > 0).astype(float),
        "confidence": top[:, 0],
        "margin": top[:, 0] - top[:, 1] if s.shape[1] > 1 else np.full(len(s), np.nan),
        "entropy": entropy,
        "uncertainty": entropy / uncertainty_normaliser(golds),
        "brier": np.mean((p - y) ** 2, axis=1),
    }


def _split_means(values: np.ndarray, correct: np.ndarray) -> dict[str, float | None]:
    """Mean over all, correct and incorrect instances (None for an empty subset, as lm-pub-quiz)."""
    hit = correct > 0

    def mean(v: np.ndarray):
        return None if len(v) == 0 else (v.mean(axis=0) if v.ndim > 1 else float(v.mean()))

    return {"all": mean(values), "correct": mean(values[hit]), "incorrect": mean(values[~hit])}


def relation_confidence(scores: Sequence[Sequence[float]], golds: Sequence) -> dict:
    """lm-pub-quiz 0.3.3's confidence metrics of one relation (its (instance, template) rows, n of them):

    * ``avg_softmax``: (1/n) sum_n p_n, the mean softmax vector over the answer space (one value per option);
    * ``margin_of_confidence``: (1/n) sum_n (p_n(1) - p_n(2));
    * ``confidence_score``: (1/n) sum_n p_n(1);
    * ``uncertainty_score``: (1/n) sum_n H(p_n) / log2 U (``uncertainty_normaliser``);

    each a dict over ``CONFIDENCE_SUBSETS`` (the mean over all, correct or incorrect instances; None when
    the subset is empty); and ``brier_score``: (1/n) sum_n (1/K) sum_i (p_ni - y_ni)^2 (all instances only),
    which is lm-pub-quiz's mean over options i of sklearn's ``brier_score_loss(y[:, i], p[:, i])``.
    ``support``: n. The options of one relation are its answer space, so every p_n has the same K.
    """
    arrays = instance_confidences(scores, golds)
    hit = arrays["correct"]
    return {
        "avg_softmax": _split_means(arrays["probs"], hit),
        "margin_of_confidence": _split_means(arrays["margin"], hit),
        "confidence_score": _split_means(arrays["confidence"], hit),
        "uncertainty_score": _split_means(arrays["uncertainty"], hit),
        "brier_score": float(arrays["brier"].mean()),
        "support": len(scores),
    }


def support_weighted_mean(values: Sequence[float | None], support: Sequence[int]) -> float:
    """sum_r n_r v_r / sum_r n_r over relations r with a value (lm-pub-quiz's ``accumulate_metrics``, which
    weights each relation by its support n_r; it returns NaN when any relation has none, e.g. no incorrect
    instance, where we leave that relation out). NaN when no relation has a value."""
    pairs = [(float(v), n) for v, n in zip(values, support, strict=True) if v is not None and not np.isnan(v)]
    if not pairs:
        return float("nan")
    v, n = np.asarray(pairs).T
    return float(np.sum(v * n) / np.sum(n))
