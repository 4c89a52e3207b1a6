"""BELIEF / BELIEF-ICL metrics (Zhao et al., v3 sections 2, 3.2 and 7; v1 section 3).

Pure functions over per-prompt arrays; one prompt = one (subject-relation pair,
template, subject expression). Nothing here knows the harness.

* ``accuracy_draws`` / ``fluctuation``: Acc@1 over N draws of one prompt per pair,
  the template shared by all facts of a relation in a draw (v1 section 4.1); the
  mean, range (v1 eq. 3) and population SD (v1 eq. 4) of the N accuracies.
* ``consistency``: Consist (v3 eq. 1).
* ``overconfidence`` / ``calibration_bins``: Ovconf (v3 eq. 2) with M equal-size
  bins ordered by confidence.
* ``one_word_ratio``: share of greedy answers that are one word (v3 Table 4; word: ``matching.words``).
* ``knowledge_coverage``: average / maximum / oracle coverage (v3 section 7, Table 8).

Matching is ``belief_tasks.facts.matching`` (the one implementation): accuracy is
one-directional (``contains_answer``), consistency and confidence bidirectional
(``outputs_agree``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from belief_tasks.facts.matching import normalize, outputs_agree, word_count
from belief_tasks.metrics.stats import mean_stderr as _sem

DEFAULT_DRAWS = 50_000
DEFAULT_BINS = 10
#: cells (draws x pairs) per temporary array of ``accuracy_draws``: ~8 MB each
BLOCK_CELLS = 1_000_000


# --------------------------------------------------------------------------- prompt table


@dataclass(frozen=True)
class PromptTable:
    """Per (pair, template) counts of prompts and correct prompts.

    ``n[p, t]`` prompts (subject expressions) of pair ``p`` under its relation's
    ``t``-th template, ``k[p, t]`` of them correct; ``n_templates[p]`` templates
    in pair ``p``'s relation (columns past it are padding).
    """

    pairs: tuple[str, ...]
    pair_relation: np.ndarray  # (P,) relation index of each pair
    n_templates: np.ndarray  # (P,)
    k: np.ndarray  # (P, T) correct prompts
    n: np.ndarray  # (P, T) prompts
    any_correct: np.ndarray  # (P, T) bool: some subject expression is right

    @classmethod
    def build(
        cls, fact_ids: Sequence, relation_ids: Sequence, template_ids: Sequence, correct: Sequence
    ) -> "PromptTable":
        if not (len(fact_ids) == len(relation_ids) == len(template_ids) == len(correct)):
            raise ValueError("fact_ids, relation_ids, template_ids and correct differ in length")
        if len(fact_ids) == 0:
            raise ValueError("no prompts")
        rel_templates: dict = defaultdict(dict)  # relation -> {template: column}
        pair_index: dict = {}
        pair_rel: list = []
        for p, r, t in zip(fact_ids, relation_ids, template_ids):
            cols = rel_templates[r]
            cols.setdefault(t, len(cols))
            if p not in pair_index:
                pair_index[p] = len(pair_index)
                pair_rel.append(r)
            elif pair_rel[pair_index[p]] != r:
                raise ValueError(f"pair {p!r} appears under relations {pair_rel[pair_index[p]]!r} and {r!r}")
        rel_index = {r: i for i, r in enumerate(rel_templates)}
        width = max(len(c) for c in rel_templates.values())
        P = len(pair_index)
        k = np.zeros((P, width), dtype=np.int64)
        n = np.zeros((P, width), dtype=np.int64)
        for p, r, t, c in zip(fact_ids, relation_ids, template_ids, correct):
            i, j = pair_index[p], rel_templates[r][t]
            n[i, j] += 1
            k[i, j] += bool(c)
        return cls(
            pairs=tuple(pair_index),
            pair_relation=np.array([rel_index[r] for r in pair_rel], dtype=np.int64),
            n_templates=np.array([len(rel_templates[r]) for r in pair_rel], dtype=np.int64),
            k=k,
            n=n,
            any_correct=k > 0,
        )

    def filled(self) -> tuple[np.ndarray, np.ndarray]:
        """``k, n`` where a pair lacking prompts of a template (a ``--limit`` cut) falls back to all its prompts."""
        k_all, n_all = self.k.sum(1, keepdims=True), self.n.sum(1, keepdims=True)
        missing = self.n == 0
        return np.where(missing, k_all, self.k), np.where(missing, n_all, self.n)

    def pair_expected_accuracy(self) -> np.ndarray:
        """Each pair's probability of a correct draw: mean over its relation's templates of the share correct."""
        k, n = self.filled()
        share = k / n
        valid = np.arange(share.shape[1])[None, :] < self.n_templates[:, None]
        return np.where(valid, share, 0.0).sum(1) / self.n_templates


# --------------------------------------------------------------------------- accuracy


def accuracy_draws(
    fact_ids: Sequence,
    relation_ids: Sequence,
    template_ids: Sequence,
    correct: Sequence,
    n_draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    chunk_cells: int = 4_000_000,
) -> np.ndarray:
    """The N Acc@1 values V_Acc@1 (v3 section 2.2; v1 section 3.2 and 4.1).

    Each draw picks one template per relation (uniformly, shared by all facts of
    the relation) and, per subject-relation pair, one of that template's prompts
    (uniformly over subject expressions); its accuracy is the share of pairs whose
    drawn prompt is correct. Drawing a prompt uniformly among ``n`` of which ``k``
    are correct is done exactly as ``floor(U * n) < k``. A pair without any prompt
    for the drawn template (only under ``--limit``) draws among all its prompts.
    """
    table = PromptTable.build(fact_ids, relation_ids, template_ids, correct)
    k, n = table.filled()
    rng = np.random.default_rng(seed)
    P = len(table.pairs)
    rel_sizes = np.zeros(table.pair_relation.max() + 1, dtype=np.int64)
    rel_sizes[table.pair_relation] = table.n_templates
    rows = np.arange(P)
    out = np.empty(int(n_draws))
    step = max(1, chunk_cells // max(P, 1))
    block = max(1, BLOCK_CELLS // max(P, 1))
    for start in range(0, int(n_draws), step):
        d = min(step, int(n_draws) - start)
        tpl_rel = (rng.random((d, len(rel_sizes))) * rel_sizes).astype(np.int64)  # template per relation
        # the chunk's (d, P) uniforms are drawn in row blocks: the same stream as one (d, P) draw
        # (a Generator fills arrays in order), with ~5 temporaries of a block instead of the chunk
        for lo in range(0, d, block):
            tpl = tpl_rel[lo : lo + block, table.pair_relation]  # (b, P)
            hit = rng.random(tpl.shape) * n[rows, tpl] < k[rows, tpl]
            out[start + lo : start + lo + len(tpl)] = hit.mean(1)
    return out


def fluctuation(accuracies: Sequence[float]) -> tuple[float, float]:
    """Range (v1 eq. 3: max - min) and population SD (v1 eq. 4: 1/N under the root) of V_Acc@1."""
    v = np.asarray(accuracies, dtype=float)
    return float(v.max() - v.min()), float(v.std(ddof=0))


def expected_accuracy(fact_ids, relation_ids, template_ids, correct) -> float:
    """The exact mean of ``accuracy_draws`` as N grows (= the "Average" coverage of v3 Table 8)."""
    return float(PromptTable.build(fact_ids, relation_ids, template_ids, correct).pair_expected_accuracy().mean())


def accuracy_stderr(fact_ids, relation_ids, template_ids, correct) -> float:
    """Standard error of Acc@1 over subject-relation pairs (the facts are the sample, not the draws)."""
    return _sem(PromptTable.build(fact_ids, relation_ids, template_ids, correct).pair_expected_accuracy())


# --------------------------------------------------------------------------- consistency


def pair_consistency(
    fact_ids: Sequence, answers: Sequence[str], agree: Callable[[str, str], bool] = outputs_agree
) -> dict:
    """Per pair with >= 2 prompts: the share of its unordered prompt pairs whose answers agree.

    Answers with the same normalised form are compared once (an empty answer agrees
    with nothing, as ``outputs_agree`` says), so a pair's many prompts cost only
    its few distinct answers.
    """
    groups: dict = defaultdict(Counter)
    example: dict = {}
    for p, a in zip(fact_ids, answers):
        form = normalize(a)
        groups[p][form] += 1
        example.setdefault(form, a)
    out = {}
    for p, counts in groups.items():
        total = sum(counts.values())
        if total < 2:
            continue
        forms = list(counts)
        agreeing = 0
        for i, f in enumerate(forms):
            c = counts[f]
            if f and agree(example[f], example[f]):
                agreeing += c * (c - 1) // 2
            for g in forms[i + 1 :]:
                if agree(example[f], example[g]):
                    agreeing += c * counts[g]
        out[p] = agreeing / (total * (total - 1) / 2)
    return out


def consistency(fact_ids: Sequence, answers: Sequence[str], agree: Callable[[str, str], bool] = outputs_agree) -> float:
    """Consist (v3 eq. 1; v1 eq. 5), bidirectional matching for generated answers (v3 section 3.2).

        Consist = 1/|T| * sum_t  #{i < j : w_i^t ~ w_j^t} / (|P_t| (|P_t| - 1) / 2)

    The paper writes the numerator over ordered pairs i != j; with the C(|P_t|, 2)
    denominator that only makes sense over unordered pairs (a value in [0, 1]),
    which is what we count. Pairs with a single prompt have no prompt pairs and
    are left out of T. NaN when no pair has two prompts.
    """
    values = list(pair_consistency(fact_ids, answers, agree).values())
    return float(np.mean(values)) if values else float("nan")


def consistency_stderr(fact_ids, answers, agree=outputs_agree) -> float:
    return _sem(list(pair_consistency(fact_ids, answers, agree).values()))


# --------------------------------------------------------------------------- calibration


def calibration_bins(confidence: Sequence[float], correct: Sequence, n_bins: int = DEFAULT_BINS) -> list[dict]:
    """M bins of (nearly) equal size, by descending confidence: size, mean confidence, mean accuracy.

    Ties are broken by input order (stable sort), so the bins are reproducible.
    When the count is not a multiple of M the first bins hold one item more.
    """
    conf = np.asarray(confidence, dtype=float)
    acc = np.asarray(correct, dtype=float)
    if conf.shape != acc.shape:
        raise ValueError("confidence and correct differ in length")
    order = np.argsort(-conf, kind="stable")
    bins = []
    for idx in np.array_split(order, min(n_bins, len(order))) if len(order) else []:
        bins.append({"size": int(len(idx)), "confidence": float(conf[idx].mean()), "accuracy": float(acc[idx].mean())})
    return bins


def overconfidence(confidence: Sequence[float], correct: Sequence, n_bins: int = DEFAULT_BINS) -> float:
    """Ovconf (v3 eq. 2; v1 eq. 6):

        Ovconf = sum_i w_i * (mean confidence_i - mean Acc@1_i),  bins i = 1..M by descending confidence

    The paper writes the weight as |P^(i)| / M; with M bins of equal size the intended
    weight is each bin's share of the prompts, |P^(i)| / |P| = 1/M, which is what we
    use (otherwise values would grow with the number of prompts). With these weights
    the sum telescopes: Ovconf = mean(confidence) - mean(accuracy), whatever the
    binning. The bins matter for calibration plots (``calibration_bins``), not for
    this number. Positive: overconfident; negative: underconfident.
    """
    bins = calibration_bins(confidence, correct, n_bins)
    if not bins:
        return float("nan")
    total = sum(b["size"] for b in bins)
    return float(sum(b["size"] / total * (b["confidence"] - b["accuracy"]) for b in bins))


def overconfidence_stderr(confidence: Sequence[float], correct: Sequence) -> float:
    """Standard error of Ovconf = mean(confidence - correct) over the sampled prompts."""
    return _sem(np.asarray(confidence, dtype=float) - np.asarray(correct, dtype=float))


def sampled_confidence(greedy: str, samples: Sequence[str], agree: Callable[[str, str], bool] = outputs_agree) -> float:
    """BELIEF-ICL confidence (v3 section 3.2): the share of sampled answers that match the greedy one."""
    if not samples:
        raise ValueError("no samples")
    return sum(bool(agree(greedy, s)) for s in samples) / len(samples)


# --------------------------------------------------------------------------- instruction following, coverage


def one_word_ratio(answers: Sequence[str]) -> float:
    """Share of greedy answers that are exactly one word (v3 section 5.3, Table 4; D.2, Table 15).

    The paper does not define a word; ours (``matching.words``) is a whitespace-separated
    token holding a letter or digit, so "U.S.", "Jean-Paul", "Coca-Cola" and "1984" are one
    word and "New York" two."""
    return float(np.mean([word_count(a) == 1 for a in answers]))


def one_word_stderr(answers: Sequence[str]) -> float:
    return _sem([word_count(a) == 1 for a in answers])


def empty_answer_rate(answers: Sequence[str]) -> float:
    """Share of greedy answers with no word at all: no letter or digit (empty, whitespace, punctuation).

    Not a paper metric: a count of model-side trouble. These are exactly the answers whose
    normalised token list is empty, so they are scored wrong and agree with nothing
    (``matching``); they stay in every other metric, never dropped. "42" is a word."""
    return float(np.mean([word_count(a) == 0 for a in answers]))


def empty_answer_stderr(answers: Sequence[str]) -> float:
    return _sem([word_count(a) == 0 for a in answers])


def knowledge_coverage(fact_ids, relation_ids, template_ids, correct) -> dict:
    """Knowledge coverage rates (v3 section 7, Table 8).

    * ``average``: mean Acc@1 over prompts, as drawn for Acc@1 (``expected_accuracy``);
    * ``maximum``: per relation, the accuracy of its best template, a fact counting
      as right under a template when any of its subject expressions is right (v3
      footnote 16); pairs of all relations pooled;
    * ``oracle``: share of pairs with at least one correct prompt.
    """
    table = PromptTable.build(fact_ids, relation_ids, template_ids, correct)
    best = _best_template_hits(table)
    return {
        "average": float(table.pair_expected_accuracy().mean()),
        "maximum": float(best.mean()),
        "oracle": float(table.any_correct.any(1).mean()),
    }


def coverage_stderr(fact_ids, relation_ids, template_ids, correct) -> dict:
    """Standard errors over pairs (the best-template choice itself is taken as given)."""
    table = PromptTable.build(fact_ids, relation_ids, template_ids, correct)
    return {
        "average": _sem(table.pair_expected_accuracy()),
        "maximum": _sem(_best_template_hits(table)),
        "oracle": _sem(table.any_correct.any(1)),
    }


def _best_template_hits(table: PromptTable) -> np.ndarray:
    """Per pair: is it right (any subject expression) under its relation's best template?"""
    hits = np.zeros(len(table.pairs), dtype=float)
    for r in np.unique(table.pair_relation):
        rows = table.pair_relation == r
        width = table.n_templates[rows][0]
        per_template = table.any_correct[rows, :width].mean(0)
        hits[rows] = table.any_correct[rows, int(np.argmax(per_template))]
    return hits
