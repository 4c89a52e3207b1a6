"""BELIEF-ICL's metrics on a budgeted run (``belief_tasks.metrics.belief``; unit: one subject-relation pair).

Per pair: its expected Acc@1 (the mean over its relation's templates of the share of correct subject
expressions: the exact mean of the Acc@1 draws), its Consist term (pairs with two or more prompts),
its sampled prompt's confidence minus correctness (Ovconf telescoped, v3 eq. 2), its counts of
prompts, one-word and empty answers, and per template whether any subject expression is right
(coverage, v3 section 7). Every headline metric is a pooled share of these, except
``coverage_maximum``: per relation the count of its best template, a maximum of totals.

``acc_range`` and ``acc_sd`` (v1 eqs. 3, 4) are spreads of N Acc@1 draws over the run's pairs: the
accuracy of a draw averages its pairs, so the spread shrinks as pairs are added, and a sample's
spread is not the full run's. They have no statistic here (``NotEstimable`` in
``scoring.belief_icl.METRICS``): a budgeted run reports them as NaN.

Which metric each statistic is: ``belief_tasks.scoring.belief_icl.METRICS``. Every statistic but
``overconfidence`` (Ovconf, in [-1, 1]) is a share: its interval stays inside [0, 1].
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

import numpy as np

from belief_tasks.facts.matching import word_count
from belief_tasks.metrics.belief import PromptTable, pair_consistency
from belief_tasks.metrics.budgeted import pooled, ratio
from belief_tasks.metrics.intervals import Totals, Units, selecting, share


def units(
    fact_ids: Sequence,
    relation_ids: Sequence,
    template_ids: Sequence,
    correct: Sequence,
    answers: Sequence[str],
    sampled: Mapping[str, tuple[float, bool]],
) -> Units:
    """Per-pair columns from the per-prompt columns and ``sampled`` (pair -> (confidence, correct)
    of its sampled prompt; pairs without one are left out)."""
    table = PromptTable.build(fact_ids, relation_ids, template_ids, correct)
    relation = dict(zip(fact_ids, relation_ids))
    consist = pair_consistency(fact_ids, answers)
    words = [word_count(a) for a in answers]
    prompts: Counter = Counter(fact_ids)
    one_word: Counter = Counter()
    empty: Counter = Counter()
    for p, w in zip(fact_ids, words):
        one_word[p] += w == 1
        empty[p] += w == 0
    pairs = table.pairs
    columns = {
        "one": np.ones(len(pairs)),
        "expected_acc": table.pair_expected_accuracy(),
        "consist": [consist.get(p, 0.0) for p in pairs],
        "consist_pairs": [p in consist for p in pairs],
        "overconfidence": [sampled[p][0] - float(sampled[p][1]) if p in sampled else 0.0 for p in pairs],
        "sampled": [p in sampled for p in pairs],
        "prompts": [prompts[p] for p in pairs],
        "one_word": [one_word[p] for p in pairs],
        "empty": [empty[p] for p in pairs],
        "oracle": table.any_correct.any(1),
        **{f"template{j}": table.any_correct[:, j] for j in range(table.any_correct.shape[1])},
    }
    return Units.of(list(pairs), [relation[p] for p in pairs], columns)


#: Acc@1 as the exact mean of its draws: the pairs' expected accuracy, pooled; also v3 section 7's average
#: coverage
expected_accuracy = share(pooled("expected_acc", "one"))
#: Consist (v3 eq. 1) over the pairs with two or more prompts
consistency = share(pooled("consist", "consist_pairs"))
#: Ovconf (v3 eq. 2) over the pairs with a sampled prompt: their confidence minus correctness
overconfidence = pooled("overconfidence", "sampled")
#: the share of one-word answers and of empty answers among all prompts
one_word_ratio = share(pooled("one_word", "prompts"))
empty_answer_rate = share(pooled("empty", "prompts"))
#: v3 section 7's oracle coverage: the pairs right under some template
coverage_oracle = share(pooled("oracle", "one"))


@share
@selecting
def coverage_maximum(T: Totals) -> np.ndarray:
    """v3 section 7: per relation the facts right under its best template, pooled over relations."""
    return ratio(T.block("template").max(-1).sum(-1), T["one"].sum(-1))
