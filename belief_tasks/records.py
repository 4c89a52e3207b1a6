"""The per-doc records each family logs (``--log_samples``) and the report reads back.

One ``TypedDict`` per family says which fields a record holds. Every record names its fact
``fact_id`` (one spelling everywhere; local to its dataset), its ``relation`` and its cross-dataset key
``fact_key`` (``belief_tasks.schema.FactKey.as_record``; the report joins datasets on it); prompt-level
records also carry ``template_id`` and ``subject_form``. The rules for "which facts a model knows" live here, one
function per family, and the report imports them.

Pure: no lm-eval, no torch.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Optional, TypedDict


class BeliefICLRecord(TypedDict):
    """One BELIEF-ICL subject-relation pair: its prompts' grid (templates x subject expressions, templates
    first), one extracted greedy answer and its correctness per prompt, and the sampled prompt's confidence.
    (Records logged before pair documents held one prompt: ``template_id``, ``subject_form``, ``answer``,
    ``correct``; ``belief_icl_prompts`` reads both.)"""

    fact_id: str
    relation: str
    fact_key: dict  # FactKey.as_record()
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


class BearRecord(TypedDict):
    """One BEAR (fact, template): the log-likelihood of every answer option."""

    fact_id: str
    relation: str
    fact_key: dict  # FactKey.as_record()
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


class IclkeRecord(TypedDict, total=False):
    """One IC-LKE / EIC-LKE test fact: the log-probability of every option."""

    fact_id: str
    relation: str
    fact_key: dict  # FactKey.as_record()
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


class MlmPromptRecord(TypedDict):
    """One encoder BELIEF prompt: the top of the mask distribution and the gold token's rank."""

    fact_id: str
    relation: str
    fact_key: dict  # FactKey.as_record()
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


class MonitorRecord(TypedDict):
    """One MONITOR fact: per-subword probabilities of the gold object under every anchor."""

    fact_id: str
    relation: str
    fact_key: dict  # FactKey.as_record()
    template_id: str
    subject_form: str
    object: str
    route: str
    units: list
    n_tokens: int
    primary: list  # per-unit probabilities under the positive context
    frame_ids: list
    frames: list  # per frame, per-unit probabilities
    negative_labels: list
    negatives: list  # per misleading context, per-unit probabilities
    positive_answer: str
    positive_correct: int
    answers: list
    correct: list  # per frame, 0/1
    alpha: list
    only_correct_primary: bool


# --- which facts a model knows, per family -------------------------------------------------------


def belief_icl_prompts(record: dict) -> Iterator[tuple[str, str, str, bool]]:
    """(template id, subject expression, answer, correct) of each prompt of a BELIEF-ICL record, grid order."""
    if "answers" not in record:  # one-prompt record (the earlier layout)
        yield record["template_id"], record["subject_form"], record["answer"], bool(record["correct"])
        return
    grid = ((t, s) for t in record["templates"] for s in record["subjects"])
    for (t, s), a, c in zip(grid, record["answers"], record["correct"], strict=True):
        yield t, s, a, bool(c)


def belief_icl_covered(records: Iterable[dict]) -> set[tuple[str, str]]:
    """BELIEF v3 section 6.4's covered facts: the (fact, template) combinations answered
    correctly (under any subject expression)."""
    return {(r["fact_id"], t) for r in records for t, _, _, c in belief_icl_prompts(r) if c}


def mlm_covered(records: Iterable[dict]) -> set[tuple[str, str]]:
    """v3 section 6.4's covered facts for encoders: (fact, template) with the object ranked first."""
    return {(r["fact_id"], r["template_id"]) for r in records if r.get("gold_rank") == 1}


def iclke_known(records: Iterable[dict]) -> dict[str, set[str]]:
    """IC-LKE's φ(θ, F) per relation: the facts whose gold option has the highest probability
    (eq. 4's δ; a tie for the highest probability counts as not known, as ``metrics.iclke.is_correct``)."""
    from belief_tasks.metrics.iclke import is_correct

    out: dict[str, set[str]] = {}
    for r in records:
        known = out.setdefault(r["relation"], set())
        if is_correct(r["logprobs"], int(r["gold_index"])):
            known.add(r["fact_id"])
    return out


# --- known or not, per fact: the rule of each family, for comparing probes ----------------------


def _most_templates(records: Iterable[dict], correct) -> dict[str, bool]:
    """fact -> known when the fact is right under more than half of its templates; a template counts
    as right when any of its prompts (subject expressions) is right."""
    right: dict[str, dict[str, bool]] = {}
    for r in records:
        per_template = right.setdefault(r["fact_id"], {})
        per_template[r["template_id"]] = per_template.get(r["template_id"], False) or bool(correct(r))
    return {f: sum(t.values()) * 2 > len(t) for f, t in right.items()}


def belief_icl_known(records: Iterable[dict]) -> dict[str, bool]:
    """BELIEF-ICL: v3 section 6.4 counts a (fact, template) as covered when the fact is predicted
    correctly with that template; a fact is known when it is covered under most of its templates."""
    prompts = [{"fact_id": r["fact_id"], "template_id": t, "correct": c}
               for r in records for t, _, _, c in belief_icl_prompts(r)]
    return _most_templates(prompts, lambda p: p["correct"])


def mlm_known(records: Iterable[dict]) -> dict[str, bool]:
    """Encoder BELIEF: covered as above with the object ranked first at the mask, under most templates."""
    return _most_templates(records, lambda r: r.get("gold_rank") == 1)


def bear_known(records: Iterable[dict]) -> dict[str, bool]:
    """BEAR: the gold option ranks first under most of the fact's templates (the paper scores
    templates separately and has no per-fact rule)."""
    from belief_tasks.metrics.bear import gold_rank, reduce_scores

    def first(r: dict) -> bool:  # recomputed from the log-likelihoods, as the BEAR aggregations do
        return gold_rank(reduce_scores(r["ll"], r.get("n_tokens"), r.get("reduction", "sum")), r["gold"]) == 0

    return _most_templates(records, first)


def iclke_known_by_fact(records: Iterable[dict]) -> dict[str, bool]:
    """IC-LKE: φ(θ, F) (section 4.2.2): the gold option has the highest probability."""
    from belief_tasks.metrics.iclke import is_correct

    return {r["fact_id"]: bool(is_correct(r["logprobs"], int(r["gold_index"]))) for r in records}


def monitor_known(records: Iterable[dict]) -> dict[str, bool]:
    """MONITOR: the greedy answer under the primary anchor (positive context) is correct (the
    reference code's filter for its primary anchor; the paper has no per-fact rule)."""
    return {r["fact_id"]: bool(r["positive_correct"]) for r in records}


#: family -> the rule that says which facts a model knows, per fact
KNOWN_RULES = {
    "belief_icl": belief_icl_known,
    "belief_mlm": mlm_known,
    "bear": bear_known,
    "iclke": iclke_known_by_fact,
    "monitor": monitor_known,
}
