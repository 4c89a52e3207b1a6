"""BELIEF metrics for masked LMs (BELIEF v1 section 3, v3 sections 2 and 5.4).

Pure numpy. What BELIEF-ICL shares with encoders is reused from
``belief_tasks.metrics.belief`` (the one home of those equations): the N draws of
one prompt per pair and their fluctuation (``accuracy_draws``, ``fluctuation``),
``expected_accuracy`` and ``overconfidence`` (Ovconf, v3 eq. 2 / v1 eq. 6, with
|P^(i)|/|P| weights). This module adds what only a prediction over the vocabulary
has: ranks (Acc@K, MRR), consistency by token identity, and the bias level.

Functions take arrays, one entry per masked prompt (``belief_tasks.scoring.belief_mlm``
turns the harness's records into them):

* ``fact_ids``, ``relation_ids``, ``template_ids``: which prompt (its fact, relation and
  statement template; subject expressions are the rest of a fact's prompts);
* ``ranks``: rank (1 = top) in the whole vocabulary of the best-ranked accepted object
  token ("the golden object of a prompt"), None when no accepted object is one token at
  this mask;
* ``preds``: the top-1 token; its probability (the maximum probability) is the confidence.

Content-free prompts (bias level) give ``relation_ids``, ``template_ids`` and
``candidate_probs``: one {candidate token id: probability} per prompt.

Equations:

* Acc@K = 1/|P| sum_t 1[rank(a_t, O_t) <= K]                       (v1 eq. 1)
* MRR   = 1/|P| sum_t 1 / rank(a_t, O_t)                           (v1 eq. 2)
* Consist = 1/|T| sum_t sum_{i<j} 1[w_i = w_j] / (|P_t|(|P_t|-1)/2)  (v1 eq. 5, v3 eq. 1)
* bias-level = 1 - H / H_max                                       (v3 eq. 3)
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Iterable, Mapping, Sequence

import numpy as np

# ---------------------------------------------------------------- per prompt


def _ranks(ranks: Iterable[float | None]) -> np.ndarray:
    """Ranks as floats; None (gold not rankable) becomes +inf: never in the top K, reciprocal 0."""
    return np.array([math.inf if r is None else float(r) for r in ranks], dtype=float)


def vocabulary_top_k_share(ranks: Iterable[float | None], k: int) -> float:
    """Acc@K (BELIEF v1 eq. 1): share of prompts whose golden object ranks within the top K of the
    vocabulary (1-based ranks; None, not rankable, never does)."""
    r = _ranks(ranks)
    return float(np.mean(r <= k)) if r.size else float("nan")


def mean_reciprocal_rank(ranks: Iterable[float | None]) -> float:
    """MRR (BELIEF v1 eq. 2): mean of 1 / rank of the golden object."""
    r = _ranks(ranks)
    return float(np.mean(1.0 / r)) if r.size else float("nan")


def hit(rank: float | None, k: int) -> float:
    """1[rank(a_t, O_t) <= K], the summand of Acc@K (v1 eq. 1); 0 when the gold is not rankable."""
    return 0.0 if rank is None else float(rank <= k)


def reciprocal(rank: float | None) -> float:
    """1 / rank(a_t, O_t), the summand of MRR (v1 eq. 2); 0 when the gold is not rankable."""
    return 0.0 if rank is None else 1.0 / float(rank)


# ------------------------------------------- one prompt per subject-relation pair


def _table(fact_ids: Sequence, relation_ids: Sequence, template_ids: Sequence, values: Sequence[float]):
    """relation -> (template ids, {fact_id: {template_id: [values over subject forms]}})."""
    table: dict[str, tuple[list, dict[str, dict]]] = {}
    for fact, relation, template, v in zip(fact_ids, relation_ids, template_ids, values):
        templates, facts = table.setdefault(str(relation), ([], {}))
        if template not in templates:
            templates.append(template)
        facts.setdefault(str(fact), {}).setdefault(template, []).append(float(v))
    return table


def fact_expectations(
    fact_ids: Sequence, relation_ids: Sequence, template_ids: Sequence, values: Sequence[float]
) -> np.ndarray:
    """Each fact's expected per-prompt ``values`` when one of its prompts is drawn the BELIEF way
    (v1 section 3.2, v3 section 2.2): E over draws of v1 eq. 1's (Acc@K) or eq. 2's (MRR) summand.

    A draw picks a template uniformly per relation, then a subject expression
    uniformly per fact; a fact without a prompt for the drawn template (its object
    was not a single token there) falls back to a uniform draw among its prompts.
    The mean of these expectations is the limit of mean(V) as N grows; for 0/1
    values (hits) it equals ``belief.expected_accuracy``, and it also takes graded
    values such as the reciprocal rank (MRR).
    """
    out = []
    for templates, facts in _table(fact_ids, relation_ids, template_ids, values).values():
        for by_template in facts.values():
            everything = [v for vs in by_template.values() for v in vs]
            fallback = float(np.mean(everything))
            out.append(np.mean([np.mean(by_template[t]) if t in by_template else fallback for t in templates]))
    return np.array(out, dtype=float)


def expected_mrr(
    fact_ids: Sequence, relation_ids: Sequence, template_ids: Sequence, ranks: Iterable[float | None]
) -> float:
    """MRR = 1/|P| Σ_t 1 / rank(a_t, O_t) (v1 eq. 2) of one prompt per pair, in expectation over
    the draws (``fact_expectations`` of the reciprocal ranks): what the mean of V_MRR estimates."""
    return float(fact_expectations(fact_ids, relation_ids, template_ids, [reciprocal(r) for r in ranks]).mean())


# ------------------------------------------------------------------ consistency


def fact_consistencies(fact_ids: Sequence, relation_ids: Sequence, preds: Sequence) -> np.ndarray:
    """Per subject-relation pair: share of prompt pairs (i < j) predicting the same token
    (the inner sum of v1 eq. 5 / v3 eq. 1).

    Pairs with fewer than two prompts have no pairs and are left out. Tokens are
    compared by identity, not with ``matching.outputs_agree`` as BELIEF-ICL's
    generated answers are: the encoder's prediction is one vocabulary item, and
    normalising would make punctuation predictions (".") agree with nothing.
    """
    by_fact: dict[tuple, list] = defaultdict(list)
    for fact, relation, pred in zip(fact_ids, relation_ids, preds):
        by_fact[(relation, fact)].append(pred)
    out = []
    for group in by_fact.values():
        n = len(group)
        if n < 2:
            continue
        counts = np.unique(np.asarray(group, dtype=object).astype(str), return_counts=True)[1]
        out.append(float((counts * (counts - 1)).sum()) / (n * (n - 1)))
    return np.array(out, dtype=float)


def token_consistency(fact_ids: Sequence, relation_ids: Sequence, preds: Sequence) -> float:
    """Consist (BELIEF v3 eq. 1, v1 eq. 5) of top-1 tokens, over unordered prompt pairs.

    The equation sums over i != j (ordered pairs) but divides by the number of
    unordered pairs, which would reach 2; the sum over i < j is what it means.
    """
    values = fact_consistencies(fact_ids, relation_ids, preds)
    return float(values.mean()) if values.size else float("nan")


# ------------------------------------------------------------------ bias level


def bias_level(probs: Sequence[float]) -> float:
    """bias-level = 1 - H(p) / H_max (BELIEF v3 eq. 3), H_max = log(number of candidates).

    ``probs`` are the probabilities of the candidate objects (renormalised here).
    0 for a uniform distribution, 1 when all mass is on one candidate.
    """
    p = np.asarray(probs, dtype=float)
    if p.size < 2 or p.sum() <= 0:
        return float("nan")
    p = p / p.sum()
    nz = p[p > 0]
    return float(1.0 - (-(nz * np.log(nz)).sum()) / math.log(p.size))


def _ensemble(dists: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Average of distributions, each renormalised over the candidates all of them have."""
    shared = sorted(set.intersection(*(set(d) for d in dists))) if dists else []
    if len(shared) < 2:
        return {}
    rows = np.array([[d[c] for c in shared] for d in dists], dtype=float)
    rows = rows / rows.sum(axis=1, keepdims=True)
    return dict(zip(shared, rows.mean(axis=0)))


def template_distributions(
    relation_ids: Sequence, template_ids: Sequence, candidate_probs: Sequence[Mapping]
) -> dict[tuple[str, str], dict[str, float]]:
    """(relation, template) -> {candidate: probability}, ensembled over the content-free subjects:
    the distribution whose entropy v3 eq. 3 measures.

    Each content-free prompt's candidate probabilities are renormalised over the
    candidates that all of the template's prompts share, then averaged (Zhao et al.
    2021's ensemble over "N/A", "" and "?", v3 footnote 12).
    """
    groups: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
    for relation, template, probs in zip(relation_ids, template_ids, candidate_probs):
        groups[(str(relation), str(template))].append({str(k): float(v) for k, v in dict(probs).items()})
    return {key: dist for key, dists in groups.items() if (dist := _ensemble(dists))}


def bias_single(relation_ids: Sequence, template_ids: Sequence, candidate_probs: Sequence[Mapping]) -> float:
    """Single-prompt bias: the bias level 1 - H / H_max (v3 eq. 3) of each relational template,
    averaged over all templates."""
    dists = template_distributions(relation_ids, template_ids, candidate_probs)
    levels = [bias_level(list(d.values())) for d in dists.values()]
    return float(np.mean(levels)) if levels else float("nan")


def bias_multi(relation_ids: Sequence, template_ids: Sequence, candidate_probs: Sequence[Mapping]) -> float:
    """Multi-prompt bias: per relation, the bias level (v3 eq. 3) of the distribution averaged over
    its templates (on the candidates they share); then the mean over relations."""
    by_rel: dict[str, list[dict[str, float]]] = defaultdict(list)
    for (rel, _), d in template_distributions(relation_ids, template_ids, candidate_probs).items():
        by_rel[rel].append(d)
    levels = [bias_level(list(avg.values())) for ds in by_rel.values() if (avg := _ensemble(ds))]
    return float(np.mean(levels)) if levels else float("nan")
