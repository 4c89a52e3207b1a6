"""BELIEF for encoders scoring (Zhao et al., v3 sections 2 and 5.4; v1): records -> arrays ->
``belief_tasks.metrics.belief_mlm`` and ``belief_tasks.metrics.belief``.

Two kinds of record: one per masked prompt (``MlmPromptRecord``: the top of the mask distribution and
the gold token's rank) and one per content-free prompt (``MlmBiasRecord``: the candidates'
probabilities). Known fact: the object ranked first at the mask under most of the fact's templates
(any subject expression), v3 section 6.4's covered facts.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, TypedDict

from belief_tasks.facts import seeding
from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.metrics import belief_mlm as mlm_metrics
from belief_tasks.metrics.stats import mean_stderr
from belief_tasks.scoring.common import Metric, NoStderr, most_templates, once


class MlmPromptRecord(TypedDict):
    """One encoder BELIEF prompt: the top of the mask distribution and the gold token's rank."""

    fact_id: str  # local to its dataset
    relation: str
    fact_key: dict  # the cross-dataset key, schema.FactKey.as_record(): the report joins datasets on it
    template_id: str
    subject_form: str
    pred: str
    confidence: float  # probability of the top token
    confidence_top10: float  # probability mass of the top 10 tokens (Overconf@10's default confidence)
    gold: Optional[str]
    gold_rank: Optional[int]  # 1-based; None: no accepted token
    top: list
    seed: int
    draws: int
    relation_kept: int
    relation_dropped: int


class MlmBiasRecord(TypedDict):
    """One content-free prompt: the probabilities of the relation's candidate objects."""

    relation: str
    template_id: str
    subject_form: str
    candidate_probs: dict


# --- records -> arrays ------------------------------------------------------------------------------


def prompt_ids(records: Sequence[Mapping]) -> tuple[list, list, list]:
    """(fact ids, relation ids, template ids) of prompt records."""
    return [r["fact_id"] for r in records], [r["relation"] for r in records], [r["template_id"] for r in records]


def ranks_of(records: Sequence[Mapping]) -> list:
    return [r["gold_rank"] for r in records]


def hits(records: Sequence[Mapping], k: int = 1) -> list[bool]:
    """Per prompt: is the golden object in the top k (Acc@k's summand)?"""
    return [bool(mlm_metrics.hit(r["gold_rank"], k)) for r in records]


def draw_columns(records: Sequence[Mapping], k: int) -> tuple[tuple, tuple, tuple, tuple]:
    """(pair ids, relations, templates, Acc@k hits): the arrays ``metrics.belief``'s draws take."""
    return once(
        records,
        ("belief_mlm", "draw_columns", k),
        lambda: (
            tuple(f"{r['relation']}\x1f{r['fact_id']}" for r in records),
            tuple(r["relation"] for r in records),
            tuple(r["template_id"] for r in records),
            tuple(hits(records, k)),
        ),
    )


def bias_columns(records: Sequence[Mapping]) -> tuple[list, list, list]:
    """(relation ids, template ids, candidate probabilities) of content-free records."""
    return (
        [r["relation"] for r in records],
        [r["template_id"] for r in records],
        [r["candidate_probs"] for r in records],
    )


# --- which facts a model knows -------------------------------------------------------------------------


def correct(record: Mapping) -> bool:
    """The object ranked first at the mask (Acc@1's summand)."""
    return bool(mlm_metrics.hit(record.get("gold_rank"), 1))


def covered(records: Iterable[Mapping]) -> set[tuple[str, str]]:
    """v3 section 6.4's covered facts for encoders: the (fact, template) combinations ``correct`` under any
    subject expression."""
    return {(r["fact_id"], r["template_id"]) for r in records if correct(r)}


def known(records: Iterable[Mapping]) -> dict[str, bool]:
    """fact -> known: covered (above) under most of its templates."""
    return most_templates(records, correct)


# --- aggregations (lm-eval passes the list of records) ---------------------------------------------------


def accuracy_values(records: list, k: int = 1):
    """V_Acc@k: the accuracies of the N draws of one prompt per pair (``accuracy_draws`` knob, default 50,000)."""
    n_draws, seed = int(records[0]["draws"]), int(records[0]["seed"])
    return once(
        records,
        ("belief_mlm", "draws", k, n_draws, seed),
        lambda: belief_metrics.accuracy_draws(
            *draw_columns(records, k),
            n_draws=n_draws,
            seed=seeding.derive_seed(seed, "belief_mlm", "accuracy_draws", k),
        ),
    )


def _acc(k: int):
    def agg(records: list) -> float:
        """Acc@k: the mean of the N draws' accuracies (BELIEF v1 eq. 1, v3 section 2.2)."""
        return float(accuracy_values(records, k).mean())

    def stderr(records: list) -> float:
        return belief_metrics.accuracy_stderr(*draw_columns(records, k))

    return agg, stderr


(acc_at_1, acc_at_1_stderr), (acc_at_10, acc_at_10_stderr) = _acc(1), _acc(10)


def _reciprocal_expectations(records: list):
    return mlm_metrics.fact_expectations(*prompt_ids(records), [mlm_metrics.reciprocal(r) for r in ranks_of(records)])


def mrr(records: list) -> float:
    """MRR (v1 eq. 2): the exact expectation over draws (what the mean of V_MRR estimates)."""
    return mlm_metrics.expected_mrr(*prompt_ids(records), ranks_of(records))


def mrr_stderr(records: list) -> float:
    return mean_stderr(_reciprocal_expectations(records))


def acc_at_1_range(records: list) -> float:
    return belief_metrics.fluctuation(accuracy_values(records, 1))[0]


def acc_at_1_sd(records: list) -> float:
    return belief_metrics.fluctuation(accuracy_values(records, 1))[1]


def _consistency_inputs(records: list):
    fact_ids, relation_ids, _ = prompt_ids(records)
    return fact_ids, relation_ids, [r["pred"] for r in records]


def consist(records: list) -> float:
    return mlm_metrics.token_consistency(*_consistency_inputs(records))


def consist_stderr(records: list) -> float:
    return mean_stderr(mlm_metrics.fact_consistencies(*_consistency_inputs(records)))


def _overconf(k: int, confidence: str):
    def inputs(records) -> tuple[list[float], list[bool]]:
        return [r[confidence] for r in records], hits(records, k)

    def agg(records: list) -> float:
        """Overconf@k (v1 eq. 6) with the record's ``confidence`` field as o_max (see docs/mlm.md)."""
        return belief_metrics.overconfidence(*inputs(records), belief_metrics.DEFAULT_BINS)

    def stderr(records: list) -> float:
        return belief_metrics.overconfidence_stderr(*inputs(records))

    return agg, stderr


# Overconf@10, two readings of v1 (docs/mlm.md): the text takes the maximum probability as the confidence for
# every K, which forces Overconf@10 <= Overconf@1; v1 Table 3 has Overconf@10 > Overconf@1 for every BERT, which
# the probability mass of the top 10 tokens (the default) can give. At K = 1 the two readings are one.
(
    (overconf_at_1, overconf_at_1_stderr),
    (overconf_at_10, overconf_at_10_stderr),
    (overconf_at_10_maxprob, overconf_at_10_maxprob_stderr),
) = (_overconf(1, "confidence"), _overconf(10, "confidence_top10"), _overconf(10, "confidence"))


def _relation_counts(records: list, key: str) -> float:
    return float(sum({r["relation"]: r[key] for r in records}.values()))


def prompts_kept(records: list) -> float:
    """Prompts whose objects are single tokens, summed over the relations evaluated."""
    return _relation_counts(records, "relation_kept")


def prompts_dropped(records: list) -> float:
    return _relation_counts(records, "relation_dropped")


def bias_single(records: list) -> float:
    return mlm_metrics.bias_single(*bias_columns(records))


def bias_multi(records: list) -> float:
    return mlm_metrics.bias_multi(*bias_columns(records))


#: Acc@1's range and SD: spreads of the N draws (v1 eqs. 3, 4)
SPREAD_STDERR = NoStderr("a spread of the N Acc@1 draws (v1 eqs. 3, 4), a description of the draws, not an estimate")
#: the prompts kept and dropped: counts of the run's prompts
COUNT_STDERR = NoStderr("a count of the run's prompts, exact")
#: the content-free prompts' bias (v1 section 5.4): one number per relation set, no sampling model behind it
BIAS_STDERR = NoStderr("a divergence of the content-free prompts' candidate distributions, with no sampling model")

#: metric name -> its declaration (aggregation, standard error, higher is better; no budgeted statistic: masked-LM
#: tasks take no budget) of the prompt tasks (``_belief_mlm_prompts.yaml``)
PROMPT_METRICS = {
    "acc@1": Metric(acc_at_1, acc_at_1_stderr, True, None),
    "acc@10": Metric(acc_at_10, acc_at_10_stderr, True, None),
    "mrr": Metric(mrr, mrr_stderr, True, None),
    "acc@1_range": Metric(acc_at_1_range, SPREAD_STDERR, False, None),
    "acc@1_sd": Metric(acc_at_1_sd, SPREAD_STDERR, False, None),
    "consist": Metric(consist, consist_stderr, True, None),
    "overconf@1": Metric(overconf_at_1, overconf_at_1_stderr, False, None),
    "overconf@10": Metric(overconf_at_10, overconf_at_10_stderr, False, None),
    "overconf@10_maxprob": Metric(overconf_at_10_maxprob, overconf_at_10_maxprob_stderr, False, None),
    "prompts_kept": Metric(prompts_kept, COUNT_STDERR, True, None),
    "prompts_dropped": Metric(prompts_dropped, COUNT_STDERR, False, None),
}

#: the same for the content-free tasks (``belief_mlm_bias_*.yaml``)
BIAS_METRICS = {
    "bias_single": Metric(bias_single, BIAS_STDERR, False, None),
    "bias_multi": Metric(bias_multi, BIAS_STDERR, False, None),
}

#: the family's metric table: both kinds of task
METRICS = {**PROMPT_METRICS, **BIAS_METRICS}
