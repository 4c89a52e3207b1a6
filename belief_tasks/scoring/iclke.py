"""IC-LKE / EIC-LKE scoring (Wu et al.): records -> arrays -> ``belief_tasks.metrics.iclke``.

One record per test fact: the log-probability of every option (``IclkeRecord``). Known fact:
φ(θ, F) of section 4.2.2, the gold option has the highest probability (eq. 4's δ; a tie for the
highest probability counts as not known, as ``metrics.iclke.is_correct``).

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, TypedDict

import numpy as np

from belief_tasks.metrics import iclke as iclke_metrics
from belief_tasks.metrics.budgeted import iclke as budgeted
from belief_tasks.metrics.intervals import Units
from belief_tasks.metrics.stats import mean_stderr
from belief_tasks.scoring.common import Metric, once


class IclkeRecord(TypedDict, total=False):
    """One IC-LKE / EIC-LKE test fact: the log-probability of every option."""

    fact_id: str  # local to its dataset
    relation: str
    fact_key: dict  # the cross-dataset key, schema.FactKey.as_record(): the report joins datasets on it
    template_id: str
    subject_form: str
    method: str  # "iclke" | "eiclke"
    subject: str
    gold: str
    gold_index: int
    options: list
    logprobs: list
    prediction: Optional[int]  # None on a tie for the highest probability
    correct: bool
    gold_prob: float
    pred_prob: float
    n_examples: int
    group: str  # EIC-LKE only, e.g. "P36_g0000"
    slot: int  # EIC-LKE only


# --- records -> arrays ------------------------------------------------------------------------------


def columns(records: Sequence[Mapping]) -> tuple[list[list[float]], list[int], list[str]]:
    """(option log-probabilities per fact, gold indices, relations): the arrays ``metrics.iclke`` takes."""
    return once(
        records,
        ("iclke", "columns"),
        lambda: (
            [r["logprobs"] for r in records],
            [int(r["gold_index"]) for r in records],
            [r["relation"] for r in records],
        ),
    )


def _lp_gold(records) -> tuple[list[list[float]], list[int]]:
    lps, gold, _ = columns(records)
    return lps, gold


# --- which facts a model knows -------------------------------------------------------------------------


def correct(record: Mapping) -> bool:
    """φ(θ, F) for one fact: its gold option has the highest probability."""
    return bool(iclke_metrics.is_correct(record["logprobs"], int(record["gold_index"])))


def known(records: Sequence[Mapping]) -> dict[str, bool]:
    """fact -> known (``correct``)."""
    return {r["fact_id"]: correct(r) for r in records}


def known_by_relation(records: Sequence[Mapping]) -> dict[str, set[str]]:
    """φ(θ, F) per relation, the sets the subsumption rate η compares: relation -> its known facts."""
    out: dict[str, set[str]] = {}
    for r in records:
        facts = out.setdefault(r["relation"], set())
        if correct(r):
            facts.add(r["fact_id"])
    return out


# --- aggregations (lm-eval passes the list of records) ---------------------------------------------------


def acc(records) -> float:
    """Eq. 4 over all test facts, pooled."""
    return iclke_metrics.accuracy(*_lp_gold(records))


def acc_stderr(records) -> float:
    return iclke_metrics.accuracy_stderr(*_lp_gold(records))


def acc_macro(records) -> float:
    """The mean of per-relation accuracies (the paper's averages over relations)."""
    return iclke_metrics.macro_accuracy(*columns(records))


def acc_macro_stderr(records) -> float:
    return iclke_metrics.macro_accuracy_stderr(*columns(records))


def gold_prob(records) -> float:
    """The mean probability of the gold option, normalised over the options."""
    return float(np.mean(iclke_metrics.gold_confidences(*_lp_gold(records))))


def gold_prob_stderr(records) -> float:
    return mean_stderr(iclke_metrics.gold_confidences(*_lp_gold(records)))


def _acc_at(k: float):
    def agg(records) -> float:
        """Eq. 5 (appendix D): accuracy on the facts whose predicted option has probability >= K."""
        return iclke_metrics.accuracy_at_confidence(*_lp_gold(records), k)

    def stderr(records) -> float:
        return iclke_metrics.accuracy_at_confidence_stderr(*_lp_gold(records), k)

    return agg, stderr


#: Accuracy@K's (aggregation, standard error) per threshold K
_ACC_AT = tuple(_acc_at(k) for k in iclke_metrics.THRESHOLDS)
acc_at_10, acc_at_20, acc_at_30, acc_at_40, acc_at_50, acc_at_60, acc_at_70, acc_at_80, acc_at_90 = (
    agg for agg, _ in _ACC_AT
)


def budget_units(records: Sequence[Mapping]) -> Units:
    """A budgeted run's per-fact columns (``metrics.budgeted.iclke``: its estimates of the full run)."""
    return budgeted.units([r["fact_id"] for r in records], *columns(records))


#: metric name -> its declaration (aggregation, standard error, higher is better, budgeted statistic): what the task
#: class wires and the report recomputes
METRICS = {
    "acc": Metric(acc, acc_stderr, True, budgeted.accuracy),
    "acc_macro": Metric(acc_macro, acc_macro_stderr, True, budgeted.macro_accuracy),
    "gold_prob": Metric(gold_prob, gold_prob_stderr, True, budgeted.gold_prob),
    **{
        f"acc@{k}": Metric(agg, stderr, True, budgeted.accuracy_at(k))
        for k, (agg, stderr) in zip(iclke_metrics.THRESHOLDS, _ACC_AT)
    },
}
