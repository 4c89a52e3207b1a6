"""BEAR scoring (Wiland et al., 2024): records -> arrays -> ``belief_tasks.metrics.bear``.

One record per (fact, template): the log-likelihood of every answer option (``BearRecord``). Every
number is recomputed from ``ll`` under the record's own reduction, never read from ``rank`` or
``correct``, so a record scores the same in the harness and in the report. Confidence and calibration
(lm-pub-quiz 0.3.3's ``metrics/confidence.py``): the answer-space softmax of each record's scores, every
template's records of a relation together, per relation, then weighted by the relations' instances.
Known fact: the gold option ranks first under most of the fact's templates.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch.
"""

from __future__ import annotations

from typing import Callable, Mapping, Optional, Sequence, TypedDict

import numpy as np

from belief_tasks.metrics import bear as bear_metrics
from belief_tasks.metrics.budgeted import bear as budgeted
from belief_tasks.metrics.intervals import Units
from belief_tasks.metrics.stats import weighted_mean_stderr
from belief_tasks.scoring.common import Metric, NotEstimable, most_templates, once

PRECISION_KS = (1, 5, 10)
TEMPLATE_METRICS = (0, 1, 2)  # bear_t0 .. bear_t2: BEAR has three templates per relation


class BearRecord(TypedDict):
    """One BEAR (fact, template): the log-likelihood of every answer option."""

    fact_id: str  # local to its dataset
    relation: str
    fact_key: dict  # the cross-dataset key, schema.FactKey.as_record(): the report joins datasets on it
    template_id: str
    template_index: int
    subject_form: str
    cardinality: str  # "1:1" | "1:N"
    domains: list
    scoring: str
    reduction: str
    gold: list  # indices of the correct options
    ll: list  # one log-likelihood per option
    n_tokens: Optional[list]  # scored tokens per option (reduction "mean")
    pred: int
    pred_label: str
    gold_label: str
    rank: int  # 0-based rank of the best gold option
    correct: int


# --- records -> arrays ------------------------------------------------------------------------------


def record_scores(record: Mapping):
    """A record's option scores under its own reduction (eq. 1, or per token)."""
    return bear_metrics.reduce_scores(record["ll"], record.get("n_tokens"), record.get("reduction", "sum"))


def record_rank(record: Mapping) -> int:
    """0-based rank of the record's correct option, recomputed from its log-likelihoods."""
    return bear_metrics.gold_rank(record_scores(record), record["gold"])


def ranks_of(records: Sequence[Mapping]) -> list[int]:
    """0-based gold ranks, computed once per run's records (every metric and its stderr read them)."""
    return once(records, ("bear", "ranks"), lambda: [record_rank(r) for r in records])


def templates_of(records: Sequence[Mapping]) -> list[int]:
    return [int(r["template_index"]) for r in records]


def _ranks_where(records: Sequence[Mapping], keep: Callable[[Mapping], bool]) -> tuple[list[int], list[int]]:
    """(ranks, template indices) of the records ``keep`` selects, in record order."""
    ranks = ranks_of(records)
    rows = [i for i, r in enumerate(records) if keep(r)]
    return [ranks[i] for i in rows], [int(records[i]["template_index"]) for i in rows]


# --- which facts a model knows -------------------------------------------------------------------------


def correct(record: Mapping) -> bool:
    """The gold option ranks first (P@1's summand)."""
    return record_rank(record) == 0


def known(records: Sequence[Mapping]) -> dict[str, bool]:
    """fact -> known: ``correct`` under most of its templates (the paper scores templates separately and
    has no per-fact rule)."""
    return most_templates(records, correct)


# --- aggregations (lm-eval passes the list of records) ---------------------------------------------------


def agg_bear(records):
    """BEAR score: per-template P@1 averaged over templates; stderr across templates (Table 3)."""
    return bear_metrics.bear_score(ranks_of(records), templates_of(records))


def bear_stderr(records) -> float:
    return bear_metrics.bear_score_stderr(ranks_of(records), templates_of(records))


def _cardinality_agg(cardinality: str):
    """BEAR_1:1 / BEAR_1:N of Table 3: the BEAR score on the records of "1:1" or "1:N" relations; its stderr."""

    def of(records):
        return _ranks_where(records, lambda r: r["cardinality"] == cardinality)

    def agg(records):
        return bear_metrics.bear_score(*of(records))

    def stderr(records):
        return bear_metrics.bear_score_stderr(*of(records))

    return agg, stderr


(agg_bear_1to1, bear_1to1_stderr), (agg_bear_1toN, bear_1toN_stderr) = (_cardinality_agg(c) for c in ("1:1", "1:N"))


def _p_at_k_agg(k: int, template: int | None):
    """P@k (eq. 2) pooled over all records, or over one template index's; its stderr (a share's)."""

    def ranks(records):
        if template is None:
            return ranks_of(records)
        return _ranks_where(records, lambda r: int(r["template_index"]) == template)[0]

    def agg(records):
        return bear_metrics.top_k_share(ranks(records), k)

    def stderr(records):
        return bear_metrics.mean_stderr([int(r < k) for r in ranks(records)])

    return agg, stderr


(agg_bear_t0, bear_t0_stderr), (agg_bear_t1, bear_t1_stderr), (agg_bear_t2, bear_t2_stderr) = (
    _p_at_k_agg(1, t) for t in TEMPLATE_METRICS
)
(agg_p_at_1, p_at_1_stderr), (agg_p_at_5, p_at_5_stderr), (agg_p_at_10, p_at_10_stderr) = (
    _p_at_k_agg(k, None) for k in PRECISION_KS
)


# --- confidence (lm-pub-quiz 0.3.3's metrics/confidence.py, ``metrics.bear.relation_confidence``) ----------


def scores_by_relation(records: Sequence[Mapping]) -> dict[str, tuple[list, list]]:
    """{relation: (option scores of each record, its gold indices)}: lm-pub-quiz's instance table of the
    relation, every template's rows together; once per run's records."""

    def group() -> dict[str, tuple[list, list]]:
        groups: dict[str, tuple[list, list]] = {}
        for r in (records[i] for i in instance_order(records)):
            scores, golds = groups.setdefault(r["relation"], ([], []))
            scores.append(record_scores(r))
            golds.append(r["gold"])
        return groups

    return once(records, ("bear", "scores_by_relation"), group)


def confidence_by_relation(records: Sequence[Mapping]) -> dict[str, dict]:
    """``metrics.bear.relation_confidence`` of each relation's records."""
    return {rel: bear_metrics.relation_confidence(s, g) for rel, (s, g) in scores_by_relation(records).items()}


def instance_values(records: Sequence[Mapping], key: str) -> list[float]:
    """A per-instance term (``metrics.bear.instance_confidences``) of every record, relation by relation."""
    return [
        float(v) for s, g in scores_by_relation(records).values() for v in bear_metrics.instance_confidences(s, g)[key]
    ]


def subset_values(records: Sequence[Mapping], term: str, subset: str | None) -> tuple[list[float], list[float]]:
    """The rows a confidence metric is computed over, with their weights: each relation's instances of
    ``subset`` (all, correct, incorrect), for the relations that have a value (some such instances, none
    undefined: a one-option answer space has no margin and no uncertainty); weight n_r / m_r (the
    relation's instances over its subset's), so that sum_i w_i x_i / sum_i w_i is the support-weighted
    mean over relations of ``_confidence_agg``."""
    values, weights = [], []
    for s, g in scores_by_relation(records).values():
        arrays = bear_metrics.instance_confidences(s, g)
        hit = arrays["correct"] > 0
        x = arrays[term][hit if subset == "correct" else ~hit if subset == "incorrect" else slice(None)]
        if len(x) == 0 or np.isnan(x).any():
            continue
        values += [float(v) for v in x]
        weights += [len(g) / len(x)] * len(x)
    return values, weights


#: metric -> (lm-pub-quiz's per-relation metric, subset, per-instance term)
CONFIDENCE_METRICS = {
    "confidence": ("confidence_score", "all", "confidence"),
    "confidence_correct": ("confidence_score", "correct", "confidence"),
    "confidence_incorrect": ("confidence_score", "incorrect", "confidence"),
    "margin": ("margin_of_confidence", "all", "margin"),
    "margin_correct": ("margin_of_confidence", "correct", "margin"),
    "margin_incorrect": ("margin_of_confidence", "incorrect", "margin"),
    "uncertainty": ("uncertainty_score", "all", "uncertainty"),
    "uncertainty_correct": ("uncertainty_score", "correct", "uncertainty"),
    "uncertainty_incorrect": ("uncertainty_score", "incorrect", "uncertainty"),
    "brier": ("brier_score", None, "brier"),
}


def _confidence_agg(name: str):
    """Support-weighted mean over relations of lm-pub-quiz's per-relation value (its ``accumulate_metrics``),
    over the relations that have a value. Over all instances that is the pooled mean of the per-instance
    term over those relations' instances, so its stderr is the standard error of that mean; a correct /
    incorrect split is the mean of its instances weighted n_r / m_r (``subset_values``), and its stderr
    that of a weighted mean with the weights held fixed (``metrics.stats.weighted_mean_stderr``)."""
    metric, subset, term = CONFIDENCE_METRICS[name]
    if subset in ("all", None):

        def stderr(rs):
            return bear_metrics.mean_stderr(subset_values(rs, term, None)[0])
    else:

        def stderr(rs):
            return weighted_mean_stderr(*subset_values(rs, term, subset))

    def agg(records):
        per_relation = confidence_by_relation(records).values()
        values = [v[metric] if subset is None else v[metric][subset] for v in per_relation]
        return bear_metrics.support_weighted_mean(values, [v["support"] for v in per_relation])

    return agg, stderr


#: confidence metric -> (its aggregation, its standard error)
CONFIDENCE_AGGS = {name: _confidence_agg(name) for name in CONFIDENCE_METRICS}
(
    agg_confidence,
    agg_confidence_correct,
    agg_confidence_incorrect,
    agg_margin,
    agg_margin_correct,
    agg_margin_incorrect,
    agg_uncertainty,
    agg_uncertainty_correct,
    agg_uncertainty_incorrect,
    agg_brier,
) = (agg for agg, _ in CONFIDENCE_AGGS.values())


def budget_units(records: Sequence[Mapping]) -> Units:
    """A budgeted run's per-fact columns (``metrics.budgeted.bear``: its estimates of the full run)."""
    return budgeted.units(
        [r["fact_id"] for r in records],
        [r["relation"] for r in records],
        templates_of(records),
        ranks_of(records),
        [r["cardinality"] == "1:1" for r in records],
        doc_confidences(records),
    )


def instance_order(records: Sequence[Mapping]) -> list[int]:
    """Record positions by (relation, fact, template, subject form): the order ``scores_by_relation``
    groups them in, so sums over instances do not depend on the order records were gathered in (ranks
    of a multi-process run arrive rank by rank; float addition is not associative)."""

    def key(i: int) -> tuple:
        r = records[i]
        return tuple(str(r.get(f)) for f in ("relation", "fact_id", "template_index", "template_id", "subject_form"))

    return sorted(range(len(records)), key=key)


def doc_confidences(records: Sequence[Mapping]) -> dict[str, list[float]]:
    """Each record's per-doc confidence terms (``metrics.bear.instance_confidences`` over its relation's
    records: ``correct`` and ``budgeted.CONFIDENCE_TERMS``), in record order."""
    terms = {rel: bear_metrics.instance_confidences(s, g) for rel, (s, g) in scores_by_relation(records).items()}
    seen: dict[str, int] = {}
    position = [0] * len(records)  # each record's row in its relation's group
    for i in instance_order(records):
        position[i] = seen[records[i]["relation"]] = seen.get(records[i]["relation"], -1) + 1
    out: dict[str, list[float]] = {key: [] for key in ("correct", *budgeted.CONFIDENCE_TERMS)}
    for r, row in zip(records, position):
        for key, values in out.items():
            values.append(float(terms[r["relation"]][key][row]))
    return out


#: lm-pub-quiz's uncertainty divides each entropy by log2 of the relation's distinct answers (``metrics.budgeted.bear``)
UNCERTAINTY = NotEstimable(
    "its entropies are divided by log2 of the number of distinct answers among the relation's "
    "instances, which a sample of facts does not show"
)


def _confidence(name: str, higher_is_better: bool, budgeted_statistic) -> Metric:
    agg, stderr = CONFIDENCE_AGGS[name]
    return Metric(agg, stderr, higher_is_better, budgeted_statistic)


#: metric name -> its declaration (aggregation, standard error, higher is better, budgeted statistic): what the task
#: class wires and the report recomputes
METRICS = {
    "bear": Metric(agg_bear, bear_stderr, True, budgeted.bear_score()),
    "bear_1to1": Metric(agg_bear_1to1, bear_1to1_stderr, True, budgeted.bear_score("1:1")),
    "bear_1toN": Metric(agg_bear_1toN, bear_1toN_stderr, True, budgeted.bear_score("1:N")),
    "bear_t0": Metric(agg_bear_t0, bear_t0_stderr, True, budgeted.template_p_at_1(0)),
    "bear_t1": Metric(agg_bear_t1, bear_t1_stderr, True, budgeted.template_p_at_1(1)),
    "bear_t2": Metric(agg_bear_t2, bear_t2_stderr, True, budgeted.template_p_at_1(2)),
    "p_at_1": Metric(agg_p_at_1, p_at_1_stderr, True, budgeted.p_at(1)),
    "p_at_5": Metric(agg_p_at_5, p_at_5_stderr, True, budgeted.p_at(5)),
    "p_at_10": Metric(agg_p_at_10, p_at_10_stderr, True, budgeted.p_at(10)),
    "confidence": _confidence("confidence", True, budgeted.support_weighted("confidence", "all")),
    "confidence_correct": _confidence("confidence_correct", True, budgeted.support_weighted("confidence", "correct")),
    "confidence_incorrect": _confidence(
        "confidence_incorrect", False, budgeted.support_weighted("confidence", "incorrect")
    ),
    "margin": _confidence("margin", True, budgeted.support_weighted("margin", "all")),
    "margin_correct": _confidence("margin_correct", True, budgeted.support_weighted("margin", "correct")),
    "margin_incorrect": _confidence("margin_incorrect", False, budgeted.support_weighted("margin", "incorrect")),
    "uncertainty": _confidence("uncertainty", False, UNCERTAINTY),
    "uncertainty_correct": _confidence("uncertainty_correct", False, UNCERTAINTY),
    "uncertainty_incorrect": _confidence("uncertainty_incorrect", True, UNCERTAINTY),
    "brier": _confidence("brier", False, budgeted.support_weighted("brier", "all")),
}
