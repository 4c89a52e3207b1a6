"""BEAR's metrics on a budgeted run (``belief_tasks.metrics.bear``; unit: one instance = one fact with
all its templates).

Per fact: for each template index t whether it was asked (``asked<t>``) and answered first
(``first<t>``), its counts of (fact, template) docs with the gold option in the top 1, 5 and 10, and
whether its relation is 1:1. The BEAR score (Table 3) is the mean over templates of each template's
P@1 pooled over relations: a mean of ratios of totals.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from belief_tasks.metrics.budgeted import nanmean, pooled, ratio
from belief_tasks.metrics.intervals import Totals, Units

PRECISION_KS = (1, 5, 10)


def units(fact_ids: Sequence[str], relations: Sequence[str], template_index: Sequence[int], ranks: Sequence[int],
          one_to_one: Sequence[bool]) -> Units:
    """Per-fact columns from per-(fact, template) arrays: the gold option's 0-based rank (eq. 2)."""
    facts = list(dict.fromkeys(fact_ids))
    row = {f: i for i, f in enumerate(facts)}
    templates = sorted(set(int(t) for t in template_index))
    col = {t: j for j, t in enumerate(templates)}
    asked, first = np.zeros((len(facts), len(templates))), np.zeros((len(facts), len(templates)))
    top = {k: np.zeros(len(facts)) for k in PRECISION_KS}
    relation, is_1to1 = {}, {}
    for f, r, t, rank, o in zip(fact_ids, relations, template_index, ranks, one_to_one):
        i, j = row[f], col[int(t)]
        asked[i, j] += 1
        first[i, j] += rank < 1
        for k in PRECISION_KS:
            top[k][i] += rank < k
        relation.setdefault(f, r)
        is_1to1.setdefault(f, bool(o))
    columns = {"one": np.ones(len(facts)), "docs": asked.sum(1), "one_to_one": [is_1to1[f] for f in facts],
               **{f"top{k}": top[k] for k in PRECISION_KS},
               **{f"asked{t}": asked[:, col[t]] for t in templates}, **{f"first{t}": first[:, col[t]] for t in templates}}
    return Units.of(facts, [relation[f] for f in facts], columns)


def _bear(cardinality: str | None):
    """Mean over templates of P@1 pooled over the relations of ``cardinality`` ("1:1", "1:N", None: all)."""

    def stat(T: Totals) -> np.ndarray:
        keep = np.ones_like(T["one"]) if cardinality is None else (T["one_to_one"] > 0) == (cardinality == "1:1")
        first, asked = T.block("first") * keep[..., None], T.block("asked") * keep[..., None]
        return nanmean(ratio(first.sum(-2), asked.sum(-2)))

    return stat


def _template(t: int):
    def stat(T: Totals) -> np.ndarray:
        if f"asked{t}" not in T.columns:
            return np.full(T.values.shape[:-2], np.nan)
        return ratio(T[f"first{t}"].sum(-1), T[f"asked{t}"].sum(-1))

    return stat


STATISTICS = {
    "bear": _bear(None),
    "bear_1to1": _bear("1:1"),
    "bear_1toN": _bear("1:N"),
    **{f"bear_t{t}": _template(t) for t in (0, 1, 2)},
    **{f"p_at_{k}": pooled(f"top{k}", "docs") for k in PRECISION_KS},
}
