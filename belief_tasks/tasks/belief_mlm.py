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
lm-eval's CLI merges into ``--metadata`` and so into the task's ``Options.metadata``
(from Python, put ``pretrained`` in the TaskManager's metadata).

``--metadata`` knobs: ``belief_tasks.families.BeliefMLMOptions`` (the common ones plus
``accuracy_draws`` and ``mlm_templates``), and the data source's (``belief_tasks.data.sources``).

Records, their scoring and the metric tables: ``belief_tasks.scoring.belief_mlm``.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.facts.schema import Fact, FactSet, Relation, SchemaError, fact_key
from belief_tasks.families import BELIEF_MLM, BeliefMLMOptions
from belief_tasks.options import KnobError
from belief_tasks.prompts.belief_mlm import content_free_prompts, fact_prompts, masked_prompt, mp_templates
from belief_tasks.requests import MASK_TOPK, object_token_id
from belief_tasks.scoring.belief_mlm import BIAS_METRICS, PROMPT_METRICS
from belief_tasks.tasks.base import (
    BeliefTask,
    DocList,
    as_split,
    check_relations,
    model_tokenizer,
    probe,
    record_design,
    select_facts,
    unpack,
)

log = logging.getLogger(__name__)

TOP_K = 10  # Acc@10 needs ranks only; the top 10 tokens are logged for reading

OPTIONS = BeliefMLMOptions


# ------------------------------------------------------------------- tokenizer


def mlm_tokenizer(metadata: Mapping[str, Any] | None):
    """The evaluated masked LM's tokenizer (``model_tokenizer``), which must have a mask token."""
    tok = model_tokenizer(metadata, needed_for="belief_mlm tasks (they keep prompts with single-token objects)")
    if tok.mask_token is None:
        raise KnobError(
            "pretrained",
            f"tokenizer {tok.name_or_path} has no mask token: belief_mlm tasks need a "
            "masked LM (run with --model hf-mlm)",
        )
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


def prompt_docs(dataset: str, opts: BeliefMLMOptions) -> tuple[DocList, dict[str, dict[str, int]]]:
    """Docs for ``belief_mlm_<dataset>`` (with the selection's draw: ``DocList.draw``) and per-relation counts
    {relation: {kept, dropped, facts_kept, facts_dropped}}."""
    tok = mlm_tokenizer(opts.metadata)
    fs = load_facts(dataset, opts.metadata)
    cache: dict = {}
    docs: list[dict] = []
    counts: dict = {}
    selection = select_facts(fs, opts)
    for fact in selection:
        rel = fs.relations[fact.relation]
        c = counts.setdefault(rel.id, {"kept": 0, "dropped": 0, "facts_kept": 0, "facts_dropped": 0})
        accepted = _accepted_tokens(tok, rel, fact, cache, opts.mlm_templates)
        n_before, key = len(docs), fact_key(fact, rel).as_record()
        for p in fact_prompts(fact, rel, opts.mlm_templates):
            if not accepted[p.template_id]:
                c["dropped"] += 1
                continue
            c["kept"] += 1
            docs.append(
                {
                    "relation": p.relation,
                    "fact_id": p.fact_id,
                    "fact_key": key,
                    "template_id": p.template_id,
                    "subject_form": p.subject_form,
                    "subject": p.subject,
                    "prompt": p.text,
                    "object": fact.object.label,
                    "accepted": accepted[p.template_id],
                    "seed": opts.seed,
                    "draws": opts.accuracy_draws,
                    **selection.design(fact),
                }
            )
        c["facts_kept" if len(docs) > n_before else "facts_dropped"] += 1
    for doc in docs:
        doc["relation_kept"], doc["relation_dropped"] = (
            counts[doc["relation"]]["kept"],
            counts[doc["relation"]]["dropped"],
        )
    _log_counts(dataset, tok, counts)
    return DocList(docs, selection.draw), counts


def _log_counts(dataset: str, tok, counts: dict[str, dict[str, int]]) -> None:
    total = {k: sum(c[k] for c in counts.values()) for k in ("kept", "dropped", "facts_kept", "facts_dropped")}
    log.warning(
        "belief_mlm_%s: kept %d prompts, dropped %d whose objects are not single tokens for %s "
        "(facts kept %d, dropped %d)",
        dataset,
        total["kept"],
        total["dropped"],
        tok.name_or_path,
        total["facts_kept"],
        total["facts_dropped"],
    )


def bias_docs(dataset: str, opts: BeliefMLMOptions) -> list[dict]:
    """Content-free prompts with the relation's single-token candidate objects (distinct tokens)."""
    tok = mlm_tokenizer(opts.metadata)
    fs = load_facts(dataset, opts.metadata)
    check_relations(fs, opts.relations)
    docs = []
    for rid, rel in fs.relations.items():
        if opts.relations is None or rid in opts.relations:
            docs += _bias_docs_of(fs, rel, tok, opts.mlm_templates)
    if not docs:
        raise SchemaError(
            f"belief_mlm_bias_{dataset}: no template has two single-token candidate objects for {tok.name_or_path}",
            file=fs.source,
            field="answer_space",
        )
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
        docs.append(
            {
                "relation": rel.id,
                "fact_id": None,
                "template_id": p.template_id,
                "subject_form": p.subject_form,
                "subject": p.subject,
                "prompt": p.text,
                "object": "",
                "candidates": list(by_token.values()),
                "n_answer_space": len(labels),
            }
        )
    return docs


@probe("belief_mlm_myriadlama", "myriadlama")
def myriadlama_docs(opts: BeliefMLMOptions):
    return as_split(prompt_docs("myriadlama", opts)[0])


@probe("belief_mlm_bear", "bear")
def bear_docs(opts: BeliefMLMOptions):
    return as_split(prompt_docs("bear", opts)[0])


@probe("belief_mlm_bias_myriadlama", "myriadlama")
def myriadlama_bias_docs(opts: BeliefMLMOptions):
    return as_split(bias_docs("myriadlama", opts))


# ---------------------------------------------------------------------- task


class BeliefMLMTask(BeliefTask[BeliefMLMOptions]):
    """``belief_mlm_*``: one ``mask_topk`` request per doc (lm-eval dispatches it by name to ``hf-mlm``)."""

    FAMILY = BELIEF_MLM.name
    WHOLE_CONTEXT = "its prompt (the subject before the mask)"
    OPTIONS = OPTIONS

    def __init__(self, config: dict | None = None, **kwargs: Any) -> None:
        # lm-eval validates the output type's name; the requests are ours
        super().__init__(config={**(config or {}), "output_type": "loglikelihood"}, **kwargs)
        self.OUTPUT_TYPE = MASK_TOPK

    def construct_requests(self, doc: dict, ctx, **kwargs):
        # The prompt is the doc's masked prompt itself: no description or few-shot prefix (zero-shot MP).
        targets = unpack(doc, "accepted") if doc.get("accepted") else unpack(doc, "candidates")
        return self.instance(MASK_TOPK, doc, (doc["prompt"], TOP_K, tuple(targets)), 0, kwargs)

    def metric_table(self, config):
        return PROMPT_METRICS


class BeliefMLMBiasTask(BeliefMLMTask):
    """``belief_mlm_bias_*``: the prompt-bias metrics of content-free prompts (``process_content_free``)."""

    def metric_table(self, config):
        return BIAS_METRICS


# ------------------------------------------------------------- per-doc records


def process_prompt(doc: dict, results: list) -> dict:
    """One ``MlmPromptRecord`` per masked prompt, under every metric name."""
    resp = results[0]
    ranked = [(t["rank"], t["token"]) for expr in unpack(doc, "accepted") if (t := resp["targets"].get(expr))]
    gold_rank, gold = min(ranked) if ranked else (None, None)
    record = {
        "relation": doc["relation"],
        "fact_id": doc["fact_id"],
        "fact_key": unpack(doc, "fact_key"),
        "template_id": doc["template_id"],
        "subject_form": doc["subject_form"],
        "pred": resp["tokens"][0],
        "confidence": math.exp(resp["logprobs"][0]),
        "confidence_top10": sum(math.exp(lp) for lp in resp["logprobs"][:10]),
        "gold": gold,
        "gold_rank": gold_rank,
        "top": resp["tokens"],
        "seed": doc["seed"],
        "draws": doc["draws"],
        "relation_kept": doc["relation_kept"],
        "relation_dropped": doc["relation_dropped"],
        **record_design(doc),
    }
    return {m: record for m in PROMPT_METRICS}


def process_content_free(doc: dict, results: list) -> dict:
    """One ``MlmBiasRecord`` per content-free prompt, under every bias metric name."""
    resp = results[0]
    probs = {str(t["token_id"]): math.exp(t["logprob"]) for t in resp["targets"].values() if t is not None}
    record = {
        "relation": doc["relation"],
        "template_id": doc["template_id"],
        "subject_form": doc["subject_form"],
        "candidate_probs": probs,
    }
    return {m: record for m in BIAS_METRICS}
