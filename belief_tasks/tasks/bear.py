"""Harness glue for BEAR and BEAR-big (``belief_bear``, ``belief_bear_big``).

One doc per (fact, template). ``BearTask`` is a plain ``multiple_choice`` task: one
``loglikelihood`` request per answer option, built by ``belief_tasks.prompts.bear``
(an empty ``doc_to_text`` in the default scoring), so it runs on lm-eval's ``hf``, on
``hf-mlm`` (PLL for masked LMs) and on ``hf-shared`` (prefix sharing).

``--metadata`` knobs: ``KNOBS`` below (the common ones plus BEAR's), and the data
source's (``source`` / ``bear_path`` / ``bear_big_path``). ``reduction: mean`` counts
scored tokens with the evaluated model's tokenizer (``tokenizer=`` or ``pretrained=``
from the model args).

Records (``belief_tasks.records.BearRecord``) -> arrays for ``belief_tasks.metrics.bear``:
``record_scores``, ``record_rank``, ``ranks_of``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from belief_tasks.data import load_facts
from belief_tasks.metrics import bear as M
from belief_tasks.metrics.budgeted import bear as budgeted_bear
from belief_tasks.metrics.intervals import Units
from belief_tasks.options import COMMON, Knob, KnobError, Options, parse_options
from belief_tasks.prompts.bear import SCORING_MODES, OptionRequests, option_requests
from belief_tasks.schema import Fact, FactSet, Relation, SchemaError
from belief_tasks.tasks.base import BeliefTask, as_split, design_of, model_tokenizer, probe, select_facts, unpack, with_stderr

PRECISION_KS = (1, 5, 10)
TEMPLATE_METRICS = (0, 1, 2)  # bear_t0 .. bear_t2: BEAR has three templates per relation

KNOBS: tuple[Knob, ...] = COMMON + (
    Knob("reduction", "str", "sum", "statement score: summed log-likelihood (eq. 1) or its mean per scored token",
         choices=M.REDUCTIONS),
    Knob("scoring", "str", "statement", "what is scored: the whole statement, only the answer, or the answer "
         "to the end of the sentence (lm-pub-quiz's conditional_score)", choices=SCORING_MODES),
    Knob("templates", "ints", None, "template indices to use, comma-separated (default: all)", minimum=0,
         unset=(None, "", "all")),
)


class BearTask(BeliefTask):
    """``belief_bear*``: a ``multiple_choice`` task over every answer option (knobs: ``KNOBS``)."""

    FAMILY = "bear"
    WHOLE_CONTEXT = "its statements (each answer option's filled template)"
    KNOBS = KNOBS

    def __init__(self, config: dict | None = None, **kwargs: Any) -> None:
        # a run on some templates reports no per-template score of the others (they would print NaN)
        config = dict(config or {})
        chosen = parse_options(KNOBS, config.get("metadata")).templates
        if chosen is not None and config.get("metric_list"):
            config["metric_list"] = [m for m in config["metric_list"] if not _other_template(m["metric"], chosen)]
        super().__init__(config, **kwargs)

    def process_results(self, doc, results):
        return {k: v for k, v in super().process_results(doc, results).items() if k in self._aggregation_list}


def _other_template(metric: str, chosen: tuple[int, ...]) -> bool:
    return metric.startswith("bear_t") and metric[6:].isdigit() and int(metric[6:]) not in chosen


# --- docs -------------------------------------------------------------------------------------


def build_docs(fs: FactSet, metadata: Mapping[str, Any] | None = None) -> list[dict]:
    """Docs in relation / fact / template order (``--limit`` keeps whole facts of the first relation)."""
    opts = parse_options(KNOBS, metadata)
    docs = []
    selection = select_facts(fs, opts)
    for fact in selection:
        rel = fs.relations[fact.relation]
        for t_index, template in enumerate(rel.templates_of("statement")):
            if opts.templates is None or t_index in opts.templates:
                docs.append({**_doc(fs, rel, fact, t_index, template.id, template.text, opts), **selection.design(fact)})
    if opts.templates is not None and not docs:
        raise KnobError("templates", f"no template with index in {list(opts.templates)}")
    if opts.reduction == "mean":
        add_token_counts(docs, metadata)
    return docs


def _doc(fs: FactSet, rel: Relation, fact: Fact, t_index: int, template_id: str, text: str, opts: Options) -> dict:
    options = [e.label for e in rel.answer_space]
    gold = [options.index(o.label) for o in fact.objects if o.label in options]
    if not gold:
        raise SchemaError(f"no correct object of {fact.id} in the answer space of {rel.id}", file=fs.source, row=fact.id, field="objects")
    return {
        "doc_id": f"{fact.id}/{template_id}",
        "relation": rel.id,
        "fact_id": fact.id,
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


def _dataset(name: str, metadata: Mapping[str, Any]) -> dict:
    return as_split(build_docs(load_facts(name, metadata), metadata))


@probe("belief_bear", "bear")
def bear_dataset(**metadata):
    return _dataset("bear", metadata)


@probe("belief_bear_big", "bear_big")
def bear_big_dataset(**metadata):
    return _dataset("bear_big", metadata)


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
        **design_of(doc),
    }
    scores = record_scores(record)
    pred = int(M.ranking(scores)[0])
    rank = M.gold_rank(scores, gold)
    record.update(pred=pred, pred_label=options[pred], gold_label=options[gold[0]], rank=rank, correct=int(rank == 0))
    return {name: record for name in METRICS}


# --- records -> arrays ----------------------------------------------------------

def record_scores(record: Mapping):
    """A record's option scores under its own reduction (eq. 1, or per token)."""
    return M.reduce_scores(record["ll"], record.get("n_tokens"), record.get("reduction", "sum"))


def record_rank(record: Mapping) -> int:
    """0-based rank of the record's correct option, recomputed from its log-likelihoods."""
    return M.gold_rank(record_scores(record), record["gold"])


def ranks_of(records: Sequence[Mapping]) -> list[int]:
    return [record_rank(r) for r in records]


def templates_of(records: Sequence[Mapping]) -> list[int]:
    return [int(r["template_index"]) for r in records]


def budget_units(records: Sequence[Mapping]) -> Units:
    """Per-fact columns of a run's records for its budgeted estimates (``metrics.budgeted.bear``)."""
    return budgeted_bear.units([r["fact_id"] for r in records], [r["relation"] for r in records], templates_of(records),
                               ranks_of(records), [r["cardinality"] == "1:1" for r in records])


def _of_cardinality(records: Sequence[Mapping], cardinality: str) -> list[Mapping]:
    """Records of "1:1" or "1:N" relations (BEAR_1:1 / BEAR_1:N in Table 3)."""
    return [r for r in records if r["cardinality"] == cardinality]


def _of_template(records: Sequence[Mapping], t: int) -> list[Mapping]:
    return [r for r in records if int(r["template_index"]) == t]


# --- aggregations (lm-eval passes the list of records) ---------------------------

def _bear_stderr(records) -> float:
    return M.bear_score_stderr(ranks_of(records), templates_of(records))


@with_stderr(_bear_stderr)
def agg_bear(records):
    """BEAR score: per-template P@1 averaged over templates; stderr across templates (Table 3)."""
    return M.bear_score(ranks_of(records), templates_of(records))


def _cardinality_agg(cardinality: str, name: str):
    @with_stderr(lambda rs: _bear_stderr(_of_cardinality(rs, cardinality)))
    def agg(records):
        return agg_bear(_of_cardinality(records, cardinality))

    agg.__name__ = agg.__qualname__ = name
    return agg


agg_bear_1to1 = _cardinality_agg("1:1", "agg_bear_1to1")
agg_bear_1toN = _cardinality_agg("1:N", "agg_bear_1toN")


def _p_at_k_agg(k: int, template: int | None, name: str):
    def pick(records):
        return records if template is None else _of_template(records, template)

    @with_stderr(lambda rs: M.mean_stderr([int(r < k) for r in ranks_of(pick(rs))]))
    def agg(records):
        return M.precision_at_k(ranks_of(pick(records)), k)

    agg.__name__ = agg.__qualname__ = name
    return agg


agg_bear_t0, agg_bear_t1, agg_bear_t2 = (_p_at_k_agg(1, t, f"agg_bear_t{t}") for t in TEMPLATE_METRICS)
agg_p_at_1, agg_p_at_5, agg_p_at_10 = (_p_at_k_agg(k, None, f"agg_p_at_{k}") for k in PRECISION_KS)

#: metric name -> (aggregation, higher is better); ``_bear_common_yaml`` lists the same names
METRICS = {
    "bear": (agg_bear, True),
    "bear_1to1": (agg_bear_1to1, True),
    "bear_1toN": (agg_bear_1toN, True),
    "bear_t0": (agg_bear_t0, True),
    "bear_t1": (agg_bear_t1, True),
    "bear_t2": (agg_bear_t2, True),
    "p_at_1": (agg_p_at_1, True),
    "p_at_5": (agg_p_at_5, True),
    "p_at_10": (agg_p_at_10, True),
}
