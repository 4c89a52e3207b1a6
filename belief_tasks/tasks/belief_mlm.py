"""BELIEF for encoders: ``belief_mlm_*`` harness tasks (BELIEF v3 sections 2 and 5.4).

* ``belief_mlm_<dataset>``: one doc per masked prompt (fact x statement template x
  subject expression), zero-shot. Each emits a ``mask_topk`` request (served by
  ``hf-mlm``) for the top of the mask distribution and the ranks of the fact's
  accepted object tokens. Prompts whose accepted objects are not a single token
  for the model's tokenizer are dropped before any model time; the counts are
  logged and reported as ``prompts_kept`` / ``prompts_dropped``.
* ``belief_mlm_bias_<dataset>``: one doc per (relation, template, content-free
  subject "N/A" / "" / "?"); the request asks for the probabilities of the
  relation's candidate objects; metrics ``bias_single`` and ``bias_multi``.

The tokenizer comes from the model args (``pretrained=``, ``tokenizer=``), which
lm-eval's CLI merges into ``--metadata`` and so into ``custom_dataset``'s kwargs
(from Python, put ``pretrained`` in the TaskManager's metadata).

``--metadata`` knobs: ``KNOBS`` below (the common ones plus ``accuracy_draws``), and the
data source's (``belief_tasks.sources``).

Records (``belief_tasks.records.MlmPromptRecord`` / ``MlmBiasRecord``) -> arrays for
``belief_tasks.metrics.belief_mlm``: ``prompt_ids``, ``draw_columns``, ``bias_columns``.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any, Mapping, Sequence

from belief_tasks import seeding
from belief_tasks.data import load_facts
from belief_tasks.metrics import belief as B
from belief_tasks.metrics import belief_mlm as M
from belief_tasks.metrics.stats import mean_stderr
from belief_tasks.options import COMMON, Knob, KnobError, parse_options
from belief_tasks.prompts.belief_mlm import TEMPLATE_SETS, content_free_prompts, fact_prompts, masked_prompt, mp_templates
from belief_tasks.requests import MASK_TOPK, object_token_id
from belief_tasks.schema import Fact, FactSet, Relation, SchemaError
from belief_tasks.tasks.base import (
    BeliefTask, as_split, check_relations, design_of, model_tokenizer, probe, select_facts, unpack, with_stderr,
)

log = logging.getLogger(__name__)

TOP_K = 10  # Acc@10 needs ranks only; the top 10 tokens are logged for reading

KNOBS: tuple[Knob, ...] = COMMON + (
    Knob("accuracy_draws", "int", B.DEFAULT_DRAWS, "N draws of one prompt per pair for Acc@K and its fluctuation",
         minimum=1),
    Knob("mlm_templates", "str", "all", "templates: every one, question-style ones with the mask after the question "
         "(v1's MyriadLAMA prompts), or statements only", choices=TEMPLATE_SETS),
)


# ------------------------------------------------------------------- tokenizer


def mlm_tokenizer(metadata: Mapping[str, Any] | None):
    """The evaluated masked LM's tokenizer (``model_tokenizer``), which must have a mask token."""
    tok = model_tokenizer(metadata, needed_for="belief_mlm tasks (they keep prompts with single-token objects)")
    if tok.mask_token is None:
        raise KnobError("pretrained", f"tokenizer {tok.name_or_path} has no mask token: belief_mlm tasks need a "
                        "masked LM (run with --model hf-mlm)")
    return tok


# ------------------------------------------------------------------------ docs


def _accepted_tokens(tok, relation: Relation, fact: Fact, cache: dict, which: str) -> dict[str, list[str]]:
    """template id -> the fact's accepted object expressions that are one token at that template's mask."""
    out = {}
    for template in mp_templates(relation, which):
        probe = masked_prompt(template, fact.subject.label)
        keep = []
        for expr in fact.object_expressions:
            key = (template.id, expr)
            if key not in cache:
                cache[key] = object_token_id(tok, probe, expr)
            if cache[key] is not None:
                keep.append(expr)
        out[template.id] = keep
    return out


def prompt_docs(dataset: str, metadata: Mapping[str, Any]) -> tuple[list[dict], dict[str, dict[str, int]]]:
    """Docs for ``belief_mlm_<dataset>`` and per-relation counts {relation: {kept, dropped, facts_kept, facts_dropped}}."""
    opts = parse_options(KNOBS, metadata)
    tok = mlm_tokenizer(metadata)
    fs = load_facts(dataset, metadata)
    cache: dict = {}
    docs, counts = [], {}
    selection = select_facts(fs, opts)
    for fact in selection:
        rel = fs.relations[fact.relation]
        c = counts.setdefault(rel.id, {"kept": 0, "dropped": 0, "facts_kept": 0, "facts_dropped": 0})
        accepted = _accepted_tokens(tok, rel, fact, cache, opts.mlm_templates)
        n_before = len(docs)
        for p in fact_prompts(fact, rel, opts.mlm_templates):
            if not accepted[p.template_id]:
                c["dropped"] += 1
                continue
            c["kept"] += 1
            docs.append({
                "relation": p.relation, "fact_id": p.fact_id, "template_id": p.template_id,
                "subject_form": p.subject_form, "subject": p.subject, "prompt": p.text,
                "object": fact.object.label, "accepted": accepted[p.template_id],
                "seed": opts.seed, "draws": opts.accuracy_draws, **selection.design(fact),
            })
        c["facts_kept" if len(docs) > n_before else "facts_dropped"] += 1
    for doc in docs:
        doc["relation_kept"], doc["relation_dropped"] = counts[doc["relation"]]["kept"], counts[doc["relation"]]["dropped"]
    _log_counts(dataset, tok, counts)
    return docs, counts


def _log_counts(dataset: str, tok, counts: dict[str, dict[str, int]]) -> None:
    total = {k: sum(c[k] for c in counts.values()) for k in ("kept", "dropped", "facts_kept", "facts_dropped")}
    log.warning("belief_mlm_%s: kept %d prompts, dropped %d whose objects are not single tokens for %s "
                "(facts kept %d, dropped %d)", dataset, total["kept"], total["dropped"], tok.name_or_path,
                total["facts_kept"], total["facts_dropped"])


def bias_docs(dataset: str, metadata: Mapping[str, Any]) -> list[dict]:
    """Content-free prompts with the relation's single-token candidate objects (distinct tokens)."""
    opts = parse_options(KNOBS, metadata)
    tok = mlm_tokenizer(metadata)
    fs = load_facts(dataset, metadata)
    check_relations(fs, opts.relations)
    docs = []
    for rid, rel in fs.relations.items():
        if opts.relations is None or rid in opts.relations:
            docs += _bias_docs_of(fs, rel, tok, opts.mlm_templates)
    if not docs:
        raise SchemaError(f"belief_mlm_bias_{dataset}: no template has two single-token candidate objects for "
                          f"{tok.name_or_path}", file=fs.source, field="answer_space")
    return docs


def _bias_docs_of(fs: FactSet, rel: Relation, tok, which: str) -> list[dict]:
    labels = [e.label for e in rel.answer_space] or sorted({o.label for f in fs.facts_of(rel.id) for o in f.objects})
    docs = []
    for p in content_free_prompts(rel, which):
        by_token: dict[int, str] = {}
        for label in labels:
            tid = object_token_id(tok, p.text, label)
            if tid is not None:
                by_token.setdefault(tid, label)  # first label per token: one candidate per token
        if len(by_token) < 2:
            continue
        docs.append({"relation": rel.id, "fact_id": None, "template_id": p.template_id, "subject_form": p.subject_form,
                     "subject": p.subject, "prompt": p.text, "object": "", "candidates": list(by_token.values()),
                     "n_answer_space": len(labels)})
    return docs


@probe("belief_mlm_myriadlama", "myriadlama")
def myriadlama_docs(**metadata: Any):
    return as_split(prompt_docs("myriadlama", metadata)[0])


@probe("belief_mlm_bear", "bear")
def bear_docs(**metadata: Any):
    return as_split(prompt_docs("bear", metadata)[0])


@probe("belief_mlm_bias_myriadlama", "myriadlama")
def myriadlama_bias_docs(**metadata: Any):
    return as_split(bias_docs("myriadlama", metadata))


# ---------------------------------------------------------------------- task


class BeliefMLMTask(BeliefTask):
    """``belief_mlm_*``: one ``mask_topk`` request per doc (lm-eval dispatches it by name to ``hf-mlm``)."""

    FAMILY = "belief_mlm"
    WHOLE_CONTEXT = "its prompt (the subject before the mask)"
    KNOBS = KNOBS

    def __init__(self, config: dict | None = None, **kwargs: Any) -> None:
        # lm-eval validates the output type's name; the requests are ours
        super().__init__(config={**(config or {}), "output_type": "loglikelihood"}, **kwargs)
        self.OUTPUT_TYPE = MASK_TOPK

    def construct_requests(self, doc: dict, ctx, **kwargs):
        # The prompt is the doc's masked prompt itself: no description or few-shot prefix (zero-shot MP).
        targets = unpack(doc, "accepted") if doc.get("accepted") else unpack(doc, "candidates")
        return self.instance(MASK_TOPK, doc, (doc["prompt"], TOP_K, tuple(targets)), 0, kwargs)


# ------------------------------------------------------------- per-doc records


def process_prompt(doc: dict, results: list) -> dict:
    """One ``MlmPromptRecord`` per masked prompt, under every metric name."""
    resp = results[0]
    ranked = [(t["rank"], t["token"]) for expr in unpack(doc, "accepted") if (t := resp["targets"].get(expr))]
    gold_rank, gold = min(ranked) if ranked else (None, None)
    record = {
        "relation": doc["relation"], "fact_id": doc["fact_id"], "template_id": doc["template_id"],
        "subject_form": doc["subject_form"], "pred": resp["tokens"][0], "confidence": math.exp(resp["logprobs"][0]),
        "confidence_top10": sum(math.exp(lp) for lp in resp["logprobs"][:10]),
        "gold": gold, "gold_rank": gold_rank, "top": resp["tokens"], "seed": doc["seed"], "draws": doc["draws"],
        "relation_kept": doc["relation_kept"], "relation_dropped": doc["relation_dropped"], **design_of(doc),
    }
    return {m: record for m in PROMPT_METRICS}


def process_content_free(doc: dict, results: list) -> dict:
    """One ``MlmBiasRecord`` per content-free prompt, under every bias metric name."""
    resp = results[0]
    probs = {str(t["token_id"]): math.exp(t["logprob"]) for t in resp["targets"].values() if t is not None}
    record = {"relation": doc["relation"], "template_id": doc["template_id"], "subject_form": doc["subject_form"],
              "candidate_probs": probs}
    return {m: record for m in BIAS_METRICS}


# ------------------------------------------------------------- records -> arrays


def prompt_ids(records: Sequence[Mapping]) -> tuple[list, list, list]:
    """(fact ids, relation ids, template ids) of prompt records."""
    return [r["fact_id"] for r in records], [r["relation"] for r in records], [r["template_id"] for r in records]


def ranks_of(records: Sequence[Mapping]) -> list:
    return [r["gold_rank"] for r in records]


def hits(records: Sequence[Mapping], k: int = 1) -> list[bool]:
    """Per prompt: is the golden object in the top k (Acc@k's summand)?"""
    return [bool(M.hit(r["gold_rank"], k)) for r in records]


def draw_columns(records: Sequence[Mapping], k: int) -> tuple:
    """(pair ids, relations, templates, Acc@k hits): the arrays ``metrics.belief``'s draws take."""
    return (
        tuple(f"{r['relation']}\x1f{r['fact_id']}" for r in records),
        tuple(r["relation"] for r in records),
        tuple(r["template_id"] for r in records),
        tuple(hits(records, k)),
    )


def bias_columns(records: Sequence[Mapping]) -> tuple[list, list, list]:
    """(relation ids, template ids, candidate probabilities) of content-free records."""
    return [r["relation"] for r in records], [r["template_id"] for r in records], [r["candidate_probs"] for r in records]


# ---------------------------------------------------------------- aggregations


@lru_cache(maxsize=8)
def _draws_of(columns: tuple, n_draws: int, seed: int, k: int):
    return B.accuracy_draws(*columns, n_draws=n_draws, seed=seeding.derive_seed(seed, "belief_mlm", "accuracy_draws", k))


def accuracy_values(records: list, k: int = 1):
    """V_Acc@k: the accuracies of the N draws of one prompt per pair (``accuracy_draws`` knob, default 50,000)."""
    return _draws_of(draw_columns(records, k), int(records[0]["draws"]), int(records[0]["seed"]), k)


def _acc(k: int):
    @with_stderr(lambda records: B.accuracy_stderr(*draw_columns(records, k)))
    def agg(records: list) -> float:
        """Acc@k: the mean of the N draws' accuracies (BELIEF v1 eq. 1, v3 section 2.2)."""
        return float(accuracy_values(records, k).mean())

    agg.__name__ = agg.__qualname__ = f"acc_at_{k}"
    return agg


acc_at_1 = _acc(1)
acc_at_10 = _acc(10)


def _reciprocal_expectations(records: list):
    return M.fact_expectations(*prompt_ids(records), [M.reciprocal(r) for r in ranks_of(records)])


@with_stderr(lambda records: mean_stderr(_reciprocal_expectations(records)))
def mrr(records: list) -> float:
    """MRR (v1 eq. 2): the exact expectation over draws (what the mean of V_MRR estimates)."""
    return M.expected_mrr(*prompt_ids(records), ranks_of(records))


@with_stderr(None)
def acc_at_1_range(records: list) -> float:
    return B.fluctuation(accuracy_values(records, 1))[0]


@with_stderr(None)
def acc_at_1_sd(records: list) -> float:
    return B.fluctuation(accuracy_values(records, 1))[1]


def _consistency_inputs(records: list):
    fact_ids, relation_ids, _ = prompt_ids(records)
    return fact_ids, relation_ids, [r["pred"] for r in records]


@with_stderr(lambda records: mean_stderr(M.fact_consistencies(*_consistency_inputs(records))))
def consist(records: list) -> float:
    return M.token_consistency(*_consistency_inputs(records))


def _overconf(k: int, confidence: str, name: str):
    def inputs(records):
        return [r[confidence] for r in records], hits(records, k)

    @with_stderr(lambda records: B.overconfidence_stderr(*inputs(records)))
    def agg(records: list) -> float:
        """Overconf@k (v1 eq. 6) with the record's ``confidence`` field as o_max (see docs/mlm.md)."""
        return B.overconfidence(*inputs(records), B.DEFAULT_BINS)

    agg.__name__ = agg.__qualname__ = name
    return agg


# Overconf@10, two readings of v1 (docs/mlm.md): the text takes the maximum probability as the confidence for
# every K, which forces Overconf@10 <= Overconf@1; v1 Table 3 has Overconf@10 > Overconf@1 for every BERT, which
# the probability mass of the top 10 tokens (the default) can give. At K = 1 the two readings are one.
overconf_at_1 = _overconf(1, "confidence", "overconf_at_1")
overconf_at_10 = _overconf(10, "confidence_top10", "overconf_at_10")
overconf_at_10_maxprob = _overconf(10, "confidence", "overconf_at_10_maxprob")


def _relation_counts(records: list, key: str) -> float:
    return float(sum({r["relation"]: r[key] for r in records}.values()))


@with_stderr(None)
def prompts_kept(records: list) -> float:
    """Prompts whose objects are single tokens, summed over the relations evaluated."""
    return _relation_counts(records, "relation_kept")


@with_stderr(None)
def prompts_dropped(records: list) -> float:
    return _relation_counts(records, "relation_dropped")


@with_stderr(None)
def bias_single(records: list) -> float:
    return M.bias_single(*bias_columns(records))


@with_stderr(None)
def bias_multi(records: list) -> float:
    return M.bias_multi(*bias_columns(records))


#: metric name -> (aggregation, higher is better) of the prompt tasks (``_belief_mlm_prompts.yaml``)
PROMPT_METRICS = {
    "acc@1": (acc_at_1, True),
    "acc@10": (acc_at_10, True),
    "mrr": (mrr, True),
    "acc@1_range": (acc_at_1_range, False),
    "acc@1_sd": (acc_at_1_sd, False),
    "consist": (consist, True),
    "overconf@1": (overconf_at_1, False),
    "overconf@10": (overconf_at_10, False),
    "overconf@10_maxprob": (overconf_at_10_maxprob, False),
    "prompts_kept": (prompts_kept, True),
    "prompts_dropped": (prompts_dropped, False),
}

#: the same for the content-free tasks (``belief_mlm_bias_*.yaml``)
BIAS_METRICS = {
    "bias_single": (bias_single, False),
    "bias_multi": (bias_multi, False),
}

#: the family's metric table: both kinds of task
METRICS = {**PROMPT_METRICS, **BIAS_METRICS}
