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
    ll = np.asarray(ll, dtype=float)
    if reduction == "sum":
        return ll
    if reduction == "mean":
        if n_tokens is None:
            raise ValueError("the mean reduction needs the number of scored tokens per option (n_tokens)")
        return ll / np.maximum(np.asarray(n_tokens, dtype=float), 1.0)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def ranking(scores: Sequence[float]) -> np.ndarray:
    """Option indices from best to worst (section 3.1, "Ranking the results"); ties keep
    answer-space order (lm-pub-quiz's stable sort)."""
    return np.argsort(-np.asarray(scores, dtype=float), kind="stable")


def gold_rank(scores: Sequence[float], gold: int | Iterable[int]) -> int:
    """0-based rank of the best-ranked correct option (BEAR has exactly one); P@k of eq. 2 is ``rank < k``."""
    gold_set = {int(gold)} if np.isscalar(gold) else {int(g) for g in gold}
    for r, idx in enumerate(ranking(scores)):
        if int(idx) in gold_set:
            return r
    raise ValueError(f"no gold index {sorted(gold_set)} among {len(scores)} options")


def precision_at_k(ranks: Sequence[int], k: int = 1) -> float:
    """Mean P@k over instances, eq. 2: P@k = 1 if the ground truth is among the top k options, else 0.

    ``ranks``: the 0-based rank of each instance's correct option. k=1 over every
    (instance, template) pair is the pooled BEAR score.
    """
    ranks = np.asarray(ranks)
    if ranks.size == 0:
        return float("nan")
    return float(np.mean(ranks < k))


def template_scores(ranks: Sequence[int], template_index: Sequence[int]) -> dict[int, float]:
    """The BEAR score (mean P@1, eq. 2) of each template index, over every relation (Table 3's
    per-template runs). ``ranks[i]`` and ``template_index[i]`` describe one (instance, template)."""
    groups: dict[int, list[int]] = defaultdict(list)
    for rank, t in zip(ranks, template_index):
        groups[int(t)].append(int(rank))
    return {t: precision_at_k(groups[t], 1) for t in sorted(groups)}


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
    return {g: precision_at_k(v, 1) for g, v in sorted(pooled.items())}
