"""Harness glue for BEAR and BEAR-big (``belief_bear``, ``belief_bear_big``).

One doc per (fact, template). ``BearTask`` is a plain ``multiple_choice`` task: one
``loglikelihood`` request per answer option, built by ``belief_tasks.prompts.bear``
(an empty ``doc_to_text`` in the default scoring), so it runs on lm-eval's ``hf``, on
``hf-mlm`` (PLL for masked LMs) and on ``hf-shared`` (prefix sharing).

``--metadata`` knobs: ``belief_tasks.families.BearOptions`` (the common ones plus BEAR's), and the data
source's (``source`` / ``bear_path`` / ``bear_big_path``). ``reduction: mean`` counts
scored tokens with the evaluated model's tokenizer (``tokenizer=`` or ``pretrained=``
from the model args).

Records, their scoring and the metric table: ``belief_tasks.scoring.bear``.
"""

from __future__ import annotations

from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.facts.schema import Fact, FactSet, Relation, SchemaError, fact_key
from belief_tasks.families import BEAR, BearOptions
from belief_tasks.metrics import bear as bear_metrics
from belief_tasks.options import KnobError
from belief_tasks.prompts.bear import OptionRequests, option_requests
from belief_tasks.scoring.bear import METRICS, record_scores
from belief_tasks.tasks.base import (
    BeliefTask,
    DocList,
    as_split,
    model_tokenizer,
    probe,
    record_design,
    select_facts,
    unpack,
)

OPTIONS = BearOptions


class BearTask(BeliefTask[BearOptions]):
    """``belief_bear*``: a ``multiple_choice`` task over every answer option (knobs: ``OPTIONS``)."""

    FAMILY = BEAR.name
    WHOLE_CONTEXT = "its statements (each answer option's filled template)"
    OPTIONS = OPTIONS

    def metric_table(self, config):
        """A run on some templates reports no per-template score of the others (they would print NaN)."""
        chosen = self.options.templates
        return {m: v for m, v in METRICS.items() if chosen is None or not _other_template(m, chosen)}

    def score_doc(self, doc, results):
        return {k: v for k, v in super().score_doc(doc, results).items() if k in self.reported}


def _other_template(metric: str, chosen: tuple[int, ...]) -> bool:
    return metric.startswith("bear_t") and metric[6:].isdigit() and int(metric[6:]) not in chosen


# --- docs -------------------------------------------------------------------------------------


def build_docs(fs: FactSet, opts: BearOptions) -> DocList:
    """Docs in relation / fact / template order (``--limit`` keeps whole facts of the first relation), with the
    selection's draw (``DocList.draw``)."""
    docs = []
    selection = select_facts(fs, opts)
    for fact in selection:
        rel = fs.relations[fact.relation]
        for t_index, template in enumerate(rel.templates_of("statement")):
            if opts.templates is None or t_index in opts.templates:
                docs.append(
                    {**_doc(fs, rel, fact, t_index, template.id, template.text, opts), **selection.design(fact)}
                )
    if opts.templates is not None and not docs:
        raise KnobError("templates", f"no template with index in {list(opts.templates)}")
    if opts.reduction == "mean":
        add_token_counts(docs, opts.metadata)
    return DocList(docs, selection.draw)


def _doc(fs: FactSet, rel: Relation, fact: Fact, t_index: int, template_id: str, text: str, opts: BearOptions) -> dict:
    options = [e.label for e in rel.answer_space]
    gold = [options.index(o.label) for o in fact.objects if o.label in options]
    if not gold:
        raise SchemaError(
            f"no correct object of {fact.id} in the answer space of {rel.id}",
            file=fs.source,
            row=fact.id,
            field="objects",
        )
    return {
        "doc_id": f"{fact.id}/{template_id}",
        "relation": rel.id,
        "fact_id": fact.id,
        "fact_key": fact_key(fact, rel).as_record(),
        "template_id": template_id,
        "template_index": t_index,
        "subject": fact.subject.label,
        "template": text,
        "options": options,
        "gold": gold,
        "cardinality": "1:1" if rel.is_one_to_one else "1:N",
        "domains": list(rel.domains),
        "scoring": opts.scoring,
        "reduction": opts.reduction,
    }


def token_counts(tokenizer, context: str, continuations: list[str]) -> list[int]:
    """Scored tokens per continuation, split as lm-eval's ``_encode_pair`` splits context and continuation."""

    def n(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]

    if not context:
        return n(continuations)
    base = n([context])[0]
    return [w - base for w in n([context + c for c in continuations])]


def add_token_counts(docs: list[dict], metadata: Mapping[str, Any] | None) -> None:
    tok = model_tokenizer(metadata, needed_for="BEAR's reduction 'mean' (it counts the scored tokens)")
    for d in docs:
        req = requests_of(d)
        d["n_tokens"] = token_counts(tok, req.context, list(req.continuations))


def _dataset(name: str, opts: BearOptions) -> dict:
    return as_split(build_docs(load_facts(name, opts.metadata), opts))


@probe("belief_bear", "bear")
def bear_dataset(opts: BearOptions):
    return _dataset("bear", opts)


@probe("belief_bear_big", "bear_big")
def bear_big_dataset(opts: BearOptions):
    return _dataset("bear_big", opts)


# --- what lm-eval asks of a multiple_choice doc --------------------------------
# Statements are rebuilt from (template, subject, options) on demand rather than stored:
# BEAR-big would otherwise hold 8.4 M statement strings in the dataset.


def requests_of(doc) -> OptionRequests:
    return option_requests(doc["template"], doc["subject"], unpack(doc, "options"), doc["scoring"])


def doc_to_text(doc) -> str:
    return requests_of(doc).context


def doc_to_choice(doc) -> list[str]:
    return list(requests_of(doc).continuations)


def doc_to_target(doc) -> int:
    return unpack(doc, "gold")[0]


def process_results(doc, results) -> dict[str, dict]:
    """One ``BearRecord`` per doc, logged with --log_samples; the same record feeds every metric."""
    ll = [float(r[0]) if isinstance(r, (tuple, list)) else float(r) for r in results]
    options = unpack(doc, "options")
    if len(ll) != len(options):
        raise RuntimeError(f"{doc['doc_id']}: {len(ll)} scores for {len(options)} options")
    n_tokens = unpack(doc, "n_tokens") if doc.get("n_tokens") not in (None, "") else None
    gold = unpack(doc, "gold")
    record = {
        "relation": doc["relation"],
        "fact_id": doc["fact_id"],
        "fact_key": unpack(doc, "fact_key"),
        "template_id": doc["template_id"],
        "template_index": int(doc["template_index"]),
        "subject_form": "label",
        "cardinality": doc["cardinality"],
        "domains": unpack(doc, "domains"),
        "scoring": doc["scoring"],
        "reduction": doc["reduction"],
        "gold": gold,
        "ll": ll,
        "n_tokens": n_tokens,
        **record_design(doc),
    }
    scores = record_scores(record)
    pred = int(bear_metrics.ranking(scores)[0])
    rank = bear_metrics.gold_rank(scores, gold)
    record.update(pred=pred, pred_label=options[pred], gold_label=options[gold[0]], rank=rank, correct=int(rank == 0))
    return {name: record for name in METRICS}
