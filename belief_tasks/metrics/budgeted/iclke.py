"""IC-LKE / EIC-LKE's metrics on a budgeted run (``belief_tasks.metrics.iclke``; unit: one test fact).

Per fact: correct (eq. 4, ties wrong), the gold option's normalised probability, and for each K of
eq. 5 whether the prediction's normalised probability reaches K (``confident<i>``) and, if so, whether
it is correct. ``acc_macro`` is the mean over relations of each relation's share (Table 7).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from belief_tasks.metrics import iclke as iclke_metrics
from belief_tasks.metrics.budgeted import pooled, relation_mean
from belief_tasks.metrics.intervals import Units, share


def units(fact_ids: Sequence[str], logprobs_list: Sequence[Sequence[float]], gold: Sequence[int],
          relations: Sequence[str]) -> Units:
    correct = np.array([iclke_metrics.is_correct(lp, g) for lp, g in zip(logprobs_list, gold)], dtype=float)
    confidence = np.array([iclke_metrics.prediction_confidence(lp) for lp in logprobs_list])
    columns = {"one": np.ones(len(correct)), "correct": correct, "gold_prob": iclke_metrics.gold_confidences(logprobs_list, gold)}
    for i, k in enumerate(iclke_metrics.THRESHOLDS):
        columns[f"confident{i}"] = confidence >= k
        columns[f"confident_correct{i}"] = (confidence >= k) * correct
    return Units.of(list(fact_ids), list(relations), columns)


#: metrics whose full-data value a sample cannot estimate (none: every metric has its statistic)
NOT_ESTIMABLE: tuple[str, ...] = ()

STATISTICS = {
    "acc": pooled("correct", "one"),
    "acc_macro": relation_mean("correct", "one"),
    "gold_prob": pooled("gold_prob", "one"),
    **{f"acc@{k}": pooled(f"confident_correct{i}", f"confident{i}") for i, k in enumerate(iclke_metrics.THRESHOLDS)},
}
for _stat in STATISTICS.values():  # accuracies and a probability: every interval inside [0, 1]
    share(_stat)
