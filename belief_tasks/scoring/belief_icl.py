"""BELIEF-ICL scoring (Zhao et al., v3): per-pair records -> per-prompt columns -> ``belief_tasks.metrics.belief``.

One record per subject-relation pair (``BeliefICLRecord``): its prompt grid (templates x subject
expressions, templates first), one extracted greedy answer and its correctness per prompt, and the
sampled prompt's confidence. Every metric is defined per pair or per prompt, so the N = 50,000
accuracy draws, consistency and coverage are aggregations over these records. Records are put in
the data's order (``order``) first, so records gathered rank by rank aggregate as one process's.
Known fact: right (under any subject expression) under most of its templates (v3 section 6.4).

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch.
"""

from __future__ import annotations

import logging
from typing import Iterable, Iterator, NamedTuple, Optional, TypedDict

from belief_tasks.facts import seeding
from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.metrics.budgeted import belief as budgeted
from belief_tasks.metrics.intervals import Units
from belief_tasks.scoring.common import Metric, NoStderr, NotEstimable, most_templates, once, records_behind

log = logging.getLogger("lm_eval.belief_icl")

#: the metric whose logged value is the record itself (the others log a ``SameRecord`` of it)
RECORD_METRIC = "acc"


class BeliefICLRecord(TypedDict):
    """One BELIEF-ICL subject-relation pair: its prompts' grid (templates x subject expressions, templates
    first), one extracted greedy answer and its correctness per prompt, and the sampled prompt's confidence.
    (Records logged before pair documents held one prompt: ``template_id``, ``subject_form``, ``answer``,
    ``correct``; ``record_prompts`` reads both.)"""

    fact_id: str  # local to its dataset
    relation: str
    fact_key: dict  # the cross-dataset key, schema.FactKey.as_record(): the report joins datasets on it
    style: str  # "mp" | "qa"
    context: str  # "zeroshot" | "4random" | "4relation" | "4template"
    templates: list  # template ids
    subjects: list  # subject expressions
    objects: list  # accepted answer strings
    answers: list  # per prompt, grid order
    correct: list  # per prompt, grid order
    sampled: Optional[int]  # the grid index of the sampled prompt; None: not sampled
    confidence: Optional[float]  # share of the K samples matching the sampled prompt's greedy answer
    n_samples: int
    seed: int
    draws: int  # N of Acc@1
    bins: int  # M of Ovconf
    order: Optional[list]  # (relation, fact) index in the data: the order of a run's documents


# --- records -> per-prompt columns --------------------------------------------------------------------


def record_prompts(record: dict) -> Iterator[tuple[str, str, str, bool]]:
    """(template id, subject expression, answer, correct) of each prompt of a record, grid order."""
    if "answers" not in record:  # one-prompt record (the earlier layout)
        yield record["template_id"], record["subject_form"], record["answer"], bool(record["correct"])
        return
    grid = ((t, s) for t in record["templates"] for s in record["subjects"])
    for (t, s), a, c in zip(grid, record["answers"], record["correct"], strict=True):
        yield t, s, a, bool(c)


class Prompts(NamedTuple):
    """Per-prompt columns of a run's records: pairs in the data's order, each pair's grid in order. (No subject
    column: no metric reads one, and at MyriadLAMA's full setting it would hold 6.5 M entries in the memo.)"""

    fact_ids: list
    relations: list
    template_ids: list
    answers: list
    correct: list


def records_of(items: list) -> list[dict]:
    """The records, in the data's order (``order``: the order of a run's documents), whatever order
    they come in: records gathered rank by rank or pooled from relation shards aggregate exactly as
    one process's. Records of older logs (no ``order``) keep their order."""
    recs = records_behind(items)
    if recs and all(r.get("order") is not None for r in recs):
        recs.sort(key=lambda r: tuple(r["order"]))
    return recs


def prompt_columns(items: list) -> Prompts:
    """Flatten pair records to prompts. A record logged before pair documents (one prompt, with
    ``template_id`` and ``answer``) is one prompt, so older sample files aggregate as before."""
    cols = Prompts([], [], [], [], [])
    for r in records_of(items):
        for t, _, a, c in record_prompts(r):
            cols.fact_ids.append(r["fact_id"])
            cols.relations.append(r["relation"])
            cols.template_ids.append(t)
            cols.answers.append(a)
            cols.correct.append(bool(c))
    return cols


def sampled_prompts(items: list) -> tuple[list[float], list[bool]]:
    """(confidence, correct) of every sampled prompt, in record order."""
    conf, correct = [], []
    for r in records_of(items):
        if r.get("confidence") is None:
            continue
        conf.append(r["confidence"])
        correct.append(bool(r["correct"][r["sampled"]] if "answers" in r else r["correct"]))
    return conf, correct


def _setting(items: list, key: str) -> int:
    """A run-wide setting (``seed``, ``draws``, ``bins``) that every record carries."""
    return int(records_of(items[:1])[0][key])


# --- which facts a model knows -------------------------------------------------------------------------


def covered(records: Iterable[dict]) -> set[tuple[str, str]]:
    """v3 section 6.4's covered facts: the (fact, template) combinations answered correctly (under any
    subject expression)."""
    return {(r["fact_id"], t) for r in records for t, _, _, c in record_prompts(r) if c}


def known(records: Iterable[dict]) -> dict[str, bool]:
    """fact -> known: covered (above) under most of its templates."""
    prompts = [
        {"fact_id": r["fact_id"], "template_id": t, "correct": c} for r in records for t, _, _, c in record_prompts(r)
    ]
    return most_templates(prompts, lambda p: p["correct"])


# --- aggregations (lm-eval passes every metric the records, or a ``SameRecord`` of each) -------------------
# The flattened columns, the N draws and the coverage table are computed once per run (``scoring.common.once``).


def _prompts(items: list) -> Prompts:
    recs = records_of(items)
    return once(recs, ("belief_icl", "prompts"), lambda: prompt_columns(recs))


def _columns(items: list) -> tuple[list, list, list, list]:
    p = _prompts(items)
    return p.fact_ids, p.relations, p.template_ids, p.correct


def _answers(items: list) -> list:
    return _prompts(items).answers


def accuracy_values(items: list):
    """V_Acc@1: the N draws' accuracies (same records, same numbers)."""
    n_draws, seed = _setting(items, "draws"), _setting(items, "seed")
    return once(
        records_of(items),
        ("belief_icl", "draws", n_draws, seed),
        lambda: belief_metrics.accuracy_draws(
            *_columns(items), n_draws=n_draws, seed=seeding.derive_seed(seed, "belief_icl", "accuracy_draws")
        ),
    )


def _once(name: str, fn, items: list):
    """``fn(columns)`` once per run: the three coverage metrics share one computation."""
    return once(records_of(items), ("belief_icl", name), lambda: fn(*_columns(items)))


def agg_acc(items: list) -> float:
    """Acc@1: mean of the N draws."""
    return float(accuracy_values(items).mean())


def acc_stderr(items: list) -> float:
    return belief_metrics.accuracy_stderr(*_columns(items))


def agg_acc_range(items: list) -> float:
    return belief_metrics.fluctuation(accuracy_values(items))[0]


def agg_acc_sd(items: list) -> float:
    return belief_metrics.fluctuation(accuracy_values(items))[1]


def agg_consist(items: list) -> float:
    return belief_metrics.consistency(_prompts(items).fact_ids, _answers(items))


def consist_stderr(items: list) -> float:
    return belief_metrics.consistency_stderr(_prompts(items).fact_ids, _answers(items))


def ovconf_stderr(items: list) -> float:
    return belief_metrics.overconfidence_stderr(*sampled_prompts(items))


def agg_ovconf(items: list) -> float:
    conf, correct = sampled_prompts(items)
    if not conf:
        return float("nan")
    bins = _setting(items, "bins")
    first = records_of(items[:1])[0]
    for i, b in enumerate(belief_metrics.calibration_bins(conf, correct, bins), start=1):  # the report tabulates them
        log.debug(
            "belief %s/%s calibration bin %d/%d: n=%d confidence=%.4f acc=%.4f",
            first["style"],
            first["context"],
            i,
            bins,
            b["size"],
            b["confidence"],
            b["accuracy"],
        )
    return belief_metrics.overconfidence(conf, correct, bins)


def agg_one_word(items: list) -> float:
    return belief_metrics.one_word_ratio(_answers(items))


def one_word_stderr(items: list) -> float:
    return belief_metrics.one_word_stderr(_answers(items))


def empty_answer_stderr(items: list) -> float:
    return belief_metrics.empty_answer_stderr(_answers(items))


def agg_empty_answer_rate(items: list) -> float:
    answers = _answers(items)
    rate = belief_metrics.empty_answer_rate(answers)
    if rate:
        log.warning(
            "%s: %d of %d greedy answers are empty or punctuation only; they are scored wrong, not dropped",
            records_of(items[:1])[0]["style"],
            round(rate * len(answers)),
            len(answers),
        )
    return rate


def _coverage(key: str):
    """One of v3 section 6.4's coverages and its stderr (the three share one computation of each)."""

    def agg(items: list) -> float:
        return _once("coverage", belief_metrics.knowledge_coverage, items)[key]

    def stderr(items: list) -> float:
        return _once("coverage_stderr", belief_metrics.coverage_stderr, items)[key]

    return agg, stderr


(
    (agg_coverage_average, coverage_average_stderr),
    (agg_coverage_maximum, coverage_maximum_stderr),
    (agg_coverage_oracle, coverage_oracle_stderr),
) = (_coverage(k) for k in ("average", "maximum", "oracle"))


def budget_units(items: list) -> Units:
    """A budgeted run's per-pair columns (``metrics.budgeted.belief``: its estimates of the full run)."""
    p = _prompts(items)
    sampled = {
        r["fact_id"]: (r["confidence"], bool(r["correct"][r["sampled"]] if "answers" in r else r["correct"]))
        for r in records_of(items)
        if r.get("confidence") is not None
    }
    return budgeted.units(p.fact_ids, p.relations, p.template_ids, p.correct, p.answers, sampled)


#: Acc@1's range and SD (v1 eqs. 3, 4) are spreads over the run's pairs (``metrics.budgeted.belief``)
SPREAD = NotEstimable("a spread of N Acc@1 draws shrinks as pairs are added: a sample's spread is not the full run's")
#: ... and have no standard error of their own
SPREAD_STDERR = NoStderr("a spread of the N Acc@1 draws (v1 eqs. 3, 4), a description of the draws, not an estimate")

#: metric name -> its declaration (aggregation, standard error, higher is better, budgeted statistic): what the task
#: classes wire and the report recomputes
METRICS = {
    "acc": Metric(agg_acc, acc_stderr, True, budgeted.expected_accuracy),
    "acc_range": Metric(agg_acc_range, SPREAD_STDERR, False, SPREAD),
    "acc_sd": Metric(agg_acc_sd, SPREAD_STDERR, False, SPREAD),
    "consist": Metric(agg_consist, consist_stderr, True, budgeted.consistency),
    "ovconf": Metric(agg_ovconf, ovconf_stderr, False, budgeted.overconfidence),
    "one_word_ratio": Metric(agg_one_word, one_word_stderr, True, budgeted.one_word_ratio),
    "empty_answer_rate": Metric(agg_empty_answer_rate, empty_answer_stderr, False, budgeted.empty_answer_rate),
    "coverage_average": Metric(agg_coverage_average, coverage_average_stderr, True, budgeted.expected_accuracy),
    "coverage_maximum": Metric(agg_coverage_maximum, coverage_maximum_stderr, True, budgeted.coverage_maximum),
    "coverage_oracle": Metric(agg_coverage_oracle, coverage_oracle_stderr, True, budgeted.coverage_oracle),
}
