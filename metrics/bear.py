"""BEAR metrics (Wiland et al., 2024, sections 3 and 5): records in, numbers out.

A record is one (fact, template) pair with the summed log-likelihood of every
answer option (``ll``), optionally the number of scored tokens per option
(``n_tokens``, for the mean reduction), the indices of the correct options
(``gold``), the ``reduction`` used, and ids: ``relation``, ``template_index``,
``cardinality`` ("1:1" or "1:N"), ``domains``.

Ranking follows lm-pub-quiz 0.3.3 exactly: options sorted by score, descending,
with a stable sort, so a tie goes to the option listed first in the answer space
(``Accuracy`` takes ``scores.index(max(scores))``; ``PrecisionAtK`` a stable sort).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

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
    """Option indices from best to worst; ties keep answer-space order (lm-pub-quiz's stable sort)."""
    return np.argsort(-np.asarray(scores, dtype=float), kind="stable")


def gold_rank(scores: Sequence[float], gold: int | Iterable[int]) -> int:
    """0-based rank of the best-ranked correct option (BEAR has exactly one)."""
    gold_set = {int(gold)} if np.isscalar(gold) else {int(g) for g in gold}
    for r, idx in enumerate(ranking(scores)):
        if int(idx) in gold_set:
            return r
    raise ValueError(f"no gold index {sorted(gold_set)} among {len(scores)} options")


def record_scores(record: Mapping) -> np.ndarray:
    return reduce_scores(record["ll"], record.get("n_tokens"), record.get("reduction", "sum"))


def record_rank(record: Mapping) -> int:
    return gold_rank(record_scores(record), record["gold"])


def precision_at_k(ranks: Sequence[int], k: int = 1) -> float:
    """Mean P@k, eq. 2: P@k = 1 if the ground truth is among the top k options, else 0."""
    ranks = np.asarray(ranks)
    if ranks.size == 0:
        return float("nan")
    return float(np.mean(ranks < k))


def _ranks(records: Sequence[Mapping]) -> np.ndarray:
    return np.array([record_rank(r) for r in records], dtype=int)


def records_precision_at_k(records: Sequence[Mapping], k: int = 1) -> float:
    """P@k over all (instance, template) records; k=1 is the pooled BEAR score."""
    return precision_at_k(_ranks(records), k)


def mean_stderr(values: Sequence[float]) -> float:
    """Standard error of a mean: sample std (ddof=1) / sqrt(n); NaN for n < 2."""
    v = np.asarray(values, dtype=float)
    return float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def template_scores(records: Sequence[Mapping]) -> dict[int, float]:
    """The BEAR score (mean P@1) of each template index, over every relation (Table 3's per-template runs)."""
    groups: dict[int, list[int]] = defaultdict(list)
    for r in records:
        groups[int(r["template_index"])].append(record_rank(r))
    return {t: precision_at_k(groups[t], 1) for t in sorted(groups)}


def bear_score(records: Sequence[Mapping]) -> float:
    """The paper's BEAR score: P@1 of each template (section 3.2), averaged over templates (Table 3)."""
    scores = list(template_scores(records).values())
    return float(np.mean(scores)) if scores else float("nan")


def bear_score_stderr(records: Sequence[Mapping]) -> float:
    """Table 3's "±": standard error of the per-template BEAR scores across templates."""
    return mean_stderr(list(template_scores(records).values()))


def by_cardinality(records: Sequence[Mapping], cardinality: str) -> list[Mapping]:
    """Records of "1:1" or "1:N" relations (BEAR_1:1 / BEAR_1:N in Table 3)."""
    return [r for r in records if r["cardinality"] == cardinality]


def accuracy_by(records: Sequence[Mapping], key: str | Callable[[Mapping], Iterable[str]]) -> dict[str, float]:
    """P@1 per group: ``key="relation"``, ``"domains"`` (a record counts in each of its domains), or a function.

    Pooled over the group's records, which equals lm-pub-quiz's support-weighted
    accumulation over relations.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    for r in records:
        if callable(key):
            names = key(r)
        else:
            value = r[key]
            names = value if isinstance(value, (list, tuple)) else [value]
        rank = record_rank(r)
        for name in names:
            groups[str(name)].append(rank)
    return {g: precision_at_k(v, 1) for g, v in sorted(groups.items())}


def accuracy_by_relation(records: Sequence[Mapping]) -> dict[str, float]:
    return accuracy_by(records, "relation")


def accuracy_by_domain(records: Sequence[Mapping]) -> dict[str, float]:
    """Per-domain accuracy, domains from ``relation_info.json`` (a relation may have several)."""
    return accuracy_by(records, "domains")
