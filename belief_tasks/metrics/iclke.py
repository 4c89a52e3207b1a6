"""IC-LKE metrics (Wu et al., "Towards Reliable Latent Knowledge Estimation in LLMs").

Pure numpy/scipy functions, arrays in. A *choice* c is one test fact with M options;
its input is the list of option log-probabilities log P(y | σ) and the gold option's
index. Corpus-level functions take one such list per choice (``logprobs_list``), the
gold indices and, per relation, the relation of each choice; ``belief_tasks.scoring.iclke``
turns the harness's records into these arrays.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from belief_tasks.metrics.stats import binomial_stderr

#: Accuracy@K thresholds (appendix D, figure 8)
THRESHOLDS = tuple(round(0.1 * i, 1) for i in range(1, 10))


def object_logprob(token_logprobs: Sequence[float]) -> float:
    """log P(y | σ), eq. 2 in log space.

    P(y | σ) = Π_{i=1..|y|} P(y^(i) | y^(<i), σ): the product of the object's
    token probabilities, so log P = Σ_i log P(y^(i) | …). No length normalisation.
    """
    return float(np.sum(np.asarray(token_logprobs, dtype=float)))


def prediction(logprobs: Sequence[float]) -> int | None:
    """pred(c) = argmax_y P(y | σ) (eq. 3); ``None`` when the maximum is shared (a tie)."""
    lp = np.asarray(logprobs, dtype=float)
    best = np.flatnonzero(lp == lp.max())
    return int(best[0]) if len(best) == 1 else None


def first_maximum(logprobs: Sequence[float]) -> int:
    """pred(c) of eq. 3 as the reference code breaks ties (LKEs.py:107, ``list.index(max(...))``): the first
    option with the highest probability. Its gold option is the last one, so a tie that holds the gold never
    predicts it: ``first_maximum(lp) == gold`` equals ``is_correct(lp, gold)`` whenever the gold is last."""
    return int(np.argmax(np.asarray(logprobs, dtype=float)))


def is_correct(logprobs: Sequence[float], gold_index: int) -> bool:
    """δ(y* = pred(c)) of eq. 4. A tie for the maximum counts as wrong."""
    return prediction(logprobs) == gold_index


def normalised_probs(logprobs: Sequence[float]) -> np.ndarray:
    """P(y | σ) / Σ_{y'} P(y' | σ) over the options (appendix C.1), computed stably."""
    lp = np.asarray(logprobs, dtype=float)
    p = np.exp(lp - lp.max())
    return p / p.sum()


def gold_confidence(logprobs: Sequence[float], gold_index: int) -> float:
    """The gold object's P(y* | σ) (eq. 2) normalised over the options (appendix C.1)."""
    return float(normalised_probs(logprobs)[gold_index])


def prediction_confidence(logprobs: Sequence[float]) -> float:
    """P(pred(c) | σ) (eqs. 2, 3) normalised over the options: the confidence D_K of eq. 5 filters on."""
    return float(normalised_probs(logprobs).max())


def _correct(logprobs_list: Iterable[Sequence[float]], gold: Iterable[int]) -> np.ndarray:
    return np.array([is_correct(lp, g) for lp, g in zip(logprobs_list, gold)], dtype=float)


def accuracy(logprobs_list: Sequence[Sequence[float]], gold: Sequence[int]) -> float:
    """acc(θ, D) = Σ_c δ(y* = pred(c)) / |D| (eq. 4), ties wrong."""
    c = _correct(logprobs_list, gold)
    return float(c.mean()) if len(c) else float("nan")


def accuracy_at_confidence(logprobs_list: Sequence[Sequence[float]], gold: Sequence[int], k: float) -> float:
    """acc_K(θ, D_K) (eq. 5, appendix D), the paper's Accuracy@K: accuracy at confidence K, not a top-K rank.

    D_K = {c : normalised probability of pred(c) >= K}; acc_K is eq. 4 on D_K.
    NaN when D_K is empty (no instance is that confident).
    """
    conf = np.array([prediction_confidence(lp) for lp in logprobs_list])
    keep = conf >= k
    if not keep.any():
        return float("nan")
    return float(_correct(logprobs_list, gold)[keep].mean())


def accuracy_stderr(logprobs_list: Sequence[Sequence[float]], gold: Sequence[int]) -> float:
    """Standard error of eq. 4's accuracy over the choices (a binomial mean)."""
    return binomial_stderr(_correct(logprobs_list, gold))


def accuracy_at_confidence_stderr(logprobs_list: Sequence[Sequence[float]], gold: Sequence[int], k: float) -> float:
    """Standard error of acc_K (eq. 5) over D_K, the choices whose prediction has confidence >= K."""
    conf = np.array([prediction_confidence(lp) for lp in logprobs_list])
    return binomial_stderr(_correct(logprobs_list, gold)[conf >= k])


def gold_confidences(logprobs_list: Sequence[Sequence[float]], gold: Sequence[int]) -> np.ndarray:
    """Per choice, the gold object's P(y* | σ) (eq. 2) normalised over the options (appendix C.1)."""
    return np.array([gold_confidence(lp, g) for lp, g in zip(logprobs_list, gold)], dtype=float)


def coverage_at_confidence(logprobs_list: Sequence[Sequence[float]], k: float) -> float:
    """|D_K| / |D|: the share of instances Accuracy@K (eq. 5) is computed on."""
    conf = np.array([prediction_confidence(lp) for lp in logprobs_list])
    return float((conf >= k).mean()) if len(conf) else float("nan")


# ---------------------------------------------------------------- per relation


def _correct_by_relation(logprobs_list, gold, relations) -> dict[str, list[float]]:
    by: dict[str, list[float]] = {}
    for lp, g, r in zip(logprobs_list, gold, relations):
        by.setdefault(r, []).append(float(is_correct(lp, g)))
    return by


def per_relation_accuracy(
    logprobs_list: Sequence[Sequence[float]], gold: Sequence[int], relations: Sequence[str]
) -> dict[str, float]:
    """acc(θ, D_r) (eq. 4) on each relation's instances D_r (section 4.2: relations ranked per model).

    ``relations[i]``: the relation of instance i. Ties wrong, as in ``is_correct``.
    """
    by = _correct_by_relation(logprobs_list, gold, relations)
    return {r: float(np.mean(v)) for r, v in sorted(by.items())}


def macro_accuracy(logprobs_list: Sequence[Sequence[float]], gold: Sequence[int], relations: Sequence[str]) -> float:
    """Average accuracy: 1/R Σ_r acc(θ, D_r), eq. 4 per relation then the mean over the R relations
    (the paper's averages over relations, Table 7)."""
    per = per_relation_accuracy(logprobs_list, gold, relations)
    return float(np.mean(list(per.values()))) if per else float("nan")


def macro_accuracy_stderr(
    logprobs_list: Sequence[Sequence[float]], gold: Sequence[int], relations: Sequence[str]
) -> float:
    """Standard error of the average accuracy (eq. 4 per relation, averaged):
    sqrt(Σ_r p_r (1 - p_r) / n_r) / R, relations treated as independent binomials.

    NaN when a relation has a single test fact: one fact gives p_r (1 - p_r) = 0 whatever the
    model, so the plug-in would print a certainty ("± 0.000") that no sample of one can give."""
    by = _correct_by_relation(logprobs_list, gold, relations)
    if not by or min(len(v) for v in by.values()) < 2:
        return float("nan")
    var = sum(np.mean(v) * (1 - np.mean(v)) / len(v) for v in by.values())
    return float(np.sqrt(var) / len(by))


def relation_agreement(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[float, float, int]:
    """(Pearson r, Spearman ρ, number of relations) between two per-relation accuracy maps
    over their common relations (used to compare EIC-LKE with IC-LKE, and models)."""
    from scipy import stats

    common = sorted(set(a) & set(b))
    if len(common) < 3:
        return float("nan"), float("nan"), len(common)
    x = np.array([a[r] for r in common])
    y = np.array([b[r] for r in common])
    return float(stats.pearsonr(x, y)[0]), float(stats.spearmanr(x, y)[0]), len(common)
