"""BEAR's metrics on a budgeted run (``belief_tasks.metrics.bear``; unit: one instance = one fact with
all its templates).

Per fact: for each template index t whether it was asked (``asked<t>``) and answered first
(``first<t>``), its counts of (fact, template) docs with the gold option in the top 1, 5 and 10, and
whether its relation is 1:1. The BEAR score (Table 3) is the mean over templates of each template's
P@1 pooled over relations: a mean of ratios of totals.

lm-pub-quiz's confidence metrics (``metrics.bear.relation_confidence``): per fact, the sums over its docs
of each per-doc term (confidence, margin, Brier) over all, correct and incorrect docs, and its counts of
correct and incorrect docs. Per relation a term's mean over the subset's docs is a ratio of totals;
lm-pub-quiz weights relations by their docs. The uncertainty divides each entropy by log2 of the number
of distinct answers among the relation's docs, which a sample does not show (it sees only the drawn
facts' answers): it has no statistic here (``NotEstimable`` in ``scoring.bear.METRICS``).

Which metric each statistic is: ``belief_tasks.scoring.bear.METRICS``. Every statistic here is a share:
its interval stays inside [0, 1].
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from belief_tasks.metrics.budgeted import nanmean, pooled, ratio
from belief_tasks.metrics.intervals import Totals, Units, share

PRECISION_KS = (1, 5, 10)
#: per-doc terms of ``metrics.bear.instance_confidences`` a budgeted run estimates, and the docs they average
CONFIDENCE_TERMS = ("confidence", "margin", "brier")
SUBSETS = ("all", "correct", "incorrect")


def units(
    fact_ids: Sequence[str],
    relations: Sequence[str],
    template_index: Sequence[int],
    ranks: Sequence[int],
    one_to_one: Sequence[bool],
    confidences: Mapping[str, Sequence[float]] | None = None,
) -> Units:
    """Per-fact columns from per-(fact, template) arrays: the gold option's 0-based rank (eq. 2); and from
    each doc's ``confidences`` (``CONFIDENCE_TERMS`` and ``correct``, ``metrics.bear.instance_confidences``)
    their sums over all, correct and incorrect docs (``<term>_<subset>``) and ``docs_correct``, ``docs_incorrect``."""
    facts = list(dict.fromkeys(fact_ids))
    row = {f: i for i, f in enumerate(facts)}
    templates = sorted(set(int(t) for t in template_index))
    col = {t: j for j, t in enumerate(templates)}
    asked, first = np.zeros((len(facts), len(templates))), np.zeros((len(facts), len(templates)))
    top = {k: np.zeros(len(facts)) for k in PRECISION_KS}
    relation: dict = {}
    is_1to1: dict = {}
    for f, r, t, rank, o in zip(fact_ids, relations, template_index, ranks, one_to_one):
        i, j = row[f], col[int(t)]
        asked[i, j] += 1
        first[i, j] += rank < 1
        for k in PRECISION_KS:
            top[k][i] += rank < k
        relation.setdefault(f, r)
        is_1to1.setdefault(f, bool(o))
    columns = {
        "one": np.ones(len(facts)),
        "docs": asked.sum(1),
        "one_to_one": [is_1to1[f] for f in facts],
        **{f"top{k}": top[k] for k in PRECISION_KS},
        **{f"asked{t}": asked[:, col[t]] for t in templates},
        **{f"first{t}": first[:, col[t]] for t in templates},
    }
    if confidences is not None:
        columns.update(_confidence_columns(np.asarray([row[f] for f in fact_ids]), len(facts), confidences))
    return Units.of(facts, [relation[f] for f in facts], columns)


def _confidence_columns(
    fact_of: np.ndarray, n: int, confidences: Mapping[str, Sequence[float]]
) -> dict[str, np.ndarray]:
    """Per fact (``fact_of``: each doc's fact row) the sums of each term over its docs, by subset, and its
    counts of correct and incorrect docs."""
    hit = np.asarray(confidences["correct"], dtype=float) > 0
    masks = {"all": np.ones(len(hit), dtype=bool), "correct": hit, "incorrect": ~hit}
    columns = {
        f"docs_{sub}": np.bincount(fact_of[masks[sub]], minlength=n).astype(float) for sub in ("correct", "incorrect")
    }
    for term in CONFIDENCE_TERMS:
        values = np.asarray(confidences[term], dtype=float)
        for sub, mask in masks.items():
            columns[f"{term}_{sub}"] = np.zeros(n)
            np.add.at(columns[f"{term}_{sub}"], fact_of[mask], values[mask])  # NaN (one option) stays
    return columns


def bear_score(cardinality: str | None = None):
    """The BEAR score (Table 3): mean over templates of P@1 pooled over the relations of ``cardinality``
    ("1:1", "1:N", None: all)."""

    def stat(T: Totals) -> np.ndarray:
        keep = np.ones_like(T["one"]) if cardinality is None else (T["one_to_one"] > 0) == (cardinality == "1:1")
        first, asked = T.block("first") * keep[..., None], T.block("asked") * keep[..., None]
        return nanmean(ratio(first.sum(-2), asked.sum(-2)))

    return share(stat)


def template_p_at_1(t: int):
    """P@1 of template index ``t``, pooled over relations; NaN where no doc of it was asked."""

    def stat(T: Totals) -> np.ndarray:
        if f"asked{t}" not in T.columns:
            return np.full(T.values.shape[:-2], np.nan)
        return ratio(T[f"first{t}"].sum(-1), T[f"asked{t}"].sum(-1))

    return share(stat)


def p_at(k: int):
    """P@k (eq. 2) pooled over every doc: the docs with the gold option in the top k over all docs."""
    if k not in PRECISION_KS:
        raise ValueError(f"P@{k}: the units count the top k for k in {PRECISION_KS} only")
    return share(pooled(f"top{k}", "docs"))


def support_weighted(term: str, subset: str):
    """lm-pub-quiz's accumulation of a per-relation mean: per relation the mean of ``term`` over its docs of
    ``subset`` (a ratio of totals), weighted by all the relation's docs, over the relations with a value
    (none: no doc of the subset, or a margin over one option)."""
    if term not in CONFIDENCE_TERMS or subset not in SUBSETS:
        raise ValueError(
            f"no per-fact sums of {term!r} over {subset!r} docs (terms {CONFIDENCE_TERMS}, subsets {SUBSETS})"
        )
    count = "docs" if subset == "all" else f"docs_{subset}"

    def stat(T: Totals) -> np.ndarray:
        if f"{term}_{subset}" not in T.columns:  # units built without the confidence terms
            return np.full(T.values.shape[:-2], np.nan)
        value, weight = ratio(T[f"{term}_{subset}"], T[count]), T["docs"]
        ok = np.isfinite(value)
        return ratio(np.where(ok, value * weight, 0.0).sum(-1), np.where(ok, weight, 0.0).sum(-1))

    return share(stat)
