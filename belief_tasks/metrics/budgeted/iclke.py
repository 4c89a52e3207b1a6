"""IC-LKE / EIC-LKE's metrics on a budgeted run (``belief_tasks.metrics.iclke``; unit: one test fact).

Per fact: correct (eq. 4, ties wrong), the gold option's normalised probability, and for each K of
eq. 5 whether the prediction's normalised probability reaches K (``confident<i>``) and, if so, whether
it is correct. The macro accuracy is the mean over relations of each relation's share (Table 7).

Which metric each statistic is: ``belief_tasks.scoring.iclke.METRICS``. Every statistic is a share: its
interval stays inside [0, 1].
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from belief_tasks.metrics import iclke as iclke_metrics
from belief_tasks.metrics.budgeted import pooled, relation_mean
from belief_tasks.metrics.intervals import Units, share


def units(
    fact_ids: Sequence[str], logprobs_list: Sequence[Sequence[float]], gold: Sequence[int], relations: Sequence[str]
) -> Units:
    correct = np.array([iclke_metrics.is_correct(lp, g) for lp, g in zip(logprobs_list, gold)], dtype=float)
    confidence = np.array([iclke_metrics.prediction_confidence(lp) for lp in logprobs_list])
    columns = {
        "one": np.ones(len(correct)),
        "correct": correct,
        "gold_prob": iclke_metrics.gold_confidences(logprobs_list, gold),
    }
    for i, k in enumerate(iclke_metrics.THRESHOLDS):
        columns[f"confident{i}"] = confidence >= k
        columns[f"confident_correct{i}"] = (confidence >= k) * correct
    return Units.of(list(fact_ids), list(relations), columns)


#: accuracy (eq. 4) pooled over every test fact
accuracy = share(pooled("correct", "one"))
#: the mean over relations of each relation's accuracy
macro_accuracy = share(relation_mean("correct", "one"))
#: the gold option's normalised probability, averaged over test facts
gold_prob = share(pooled("gold_prob", "one"))


def accuracy_at(k: float):
    """Eq. 5: accuracy on the facts whose prediction's normalised probability reaches ``k`` (a ``THRESHOLDS`` value)."""
    if k not in iclke_metrics.THRESHOLDS:
        raise ValueError(f"accuracy at {k}: the units count the thresholds {iclke_metrics.THRESHOLDS} only")
    i = iclke_metrics.THRESHOLDS.index(k)
    return share(pooled(f"confident_correct{i}", f"confident{i}"))
