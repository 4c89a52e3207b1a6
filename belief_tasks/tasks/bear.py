"""Harness glue for BEAR and BEAR-big (``belief_bear``, ``belief_bear_big``).

One doc per (fact, template). Its requests are plain ``loglikelihood`` requests,
one per answer option, built by ``belief_tasks.prompts.bear`` (``multiple_choice``
with an empty ``doc_to_text`` in the default scoring), so they run on lm-eval's
``hf``, on ``hf-mlm`` (PLL for masked LMs) and on ``hf-shared`` (prefix sharing).

Run options (``--metadata`` JSON, besides ``source`` / ``bear_path`` /
``bear_big_path`` and the common ``seed``, ``relations``, ``max_facts_per_relation``):

* ``reduction``: ``"sum"`` (default, eq. 1) or ``"mean"`` (divide by the number of
  scored tokens, counted with the model's tokenizer: ``tokenizer`` or ``pretrained``
  from the model args).
* ``scoring``: ``"statement"`` (default), ``"answer"`` (only the answer's tokens) or
  ``"answer_to_end"`` (lm-pub-quiz's ``conditional_score`` for causal LMs).
* ``templates``: template indices to use, e.g. ``"0"`` (default: all).
"""

from __future__ import annotations

from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.metrics import bear as M
from belief_tasks.prompts.bear import SCORING_MODES, OptionRequests, option_requests
from belief_tasks.schema import FactSet, SchemaError
from belief_tasks.options import COMMON, parse_options
from belief_tasks.tasks.base import as_split, select_facts, unpack, with_stderr

PRECISION_KS = (1, 5, 10)


def run_settings(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The BEAR-specific options, validated before any model time."""
    md = metadata or {}
    reduction = str(md.get("reduction") or "sum").lower()
    scoring = str(md.get("scoring") or "statement").lower()
    if reduction not in M.REDUCTIONS:
        raise ValueError(f"reduction must be one of {M.REDUCTIONS}, got {reduction!r}")
    if scoring not in SCORING_MODES:
        raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
    templates = md.get("templates")
    if templates in (None, "", "all"):
        chosen = None
    elif isinstance(templates, (int, float)):
        chosen = (int(templates),)
    elif isinstance(templates, str):
        chosen = tuple(int(t) for t in templates.replace("|", ",").split(",") if t.strip())
    else:
        chosen = tuple(int(t) for t in templates)
    return {"reduction": reduction, "scoring": scoring, "templates": chosen}


def build_docs(fs: FactSet, metadata: Mapping[str, Any] | None = None) -> list[dict]:
    """Docs in relation / fact / template order (``--limit`` keeps whole facts of the first relation)."""
    opts = parse_options(COMMON, metadata)
    settings = run_settings(metadata)
    docs = []
    for fact in select_facts(fs, opts):
        rel = fs.relations[fact.relation]
        options = [e.label for e in rel.answer_space]
        gold = [options.index(o.label) for o in fact.objects if o.label in options]
        if not gold:
            raise SchemaError(f"no correct object of {fact.id} in the answer space of {rel.id}", file=fs.source, row=fact.id, field="objects")
        templates = rel.templates_of("statement")
        for t_index, template in enumerate(templates):
            if settings["templates"] is not None and t_index not in settings["templates"]:
                continue
            docs.append({
                "doc_id": f"{fact.id}/{template.id}",
                "relation": rel.id,
                "fact_id": fact.id,
                "template_id": template.id,
                "template_index": t_index,
                "subject": fact.subject.label,
                "template": template.text,
                "options": options,
                "gold": gold,
                "cardinality": "1:1" if rel.is_one_to_one else "1:N",
                "domains": list(rel.domains),
                "scoring": settings["scoring"],
                "reduction": settings["reduction"],
            })
    if settings["templates"] is not None and not docs:
        raise ValueError(f"no template with index in {settings['templates']}")
    if settings["reduction"] == "mean":
        add_token_counts(docs, metadata)
    return docs


def _tokenizer(metadata: Mapping[str, Any] | None):
    md = metadata or {}
    name = md.get("tokenizer") or md.get("pretrained")
    if not name:
        raise ValueError(
            "reduction 'mean' counts scored tokens with the model's tokenizer: pass model_args pretrained=... "
            "(or tokenizer=...) so the task can load it"
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(name), trust_remote_code=str(md.get("trust_remote_code", False)).strip().lower() in ("1", "true", "yes", "on"))


def token_counts(tokenizer, context: str, continuations: list[str]) -> list[int]:
    """Scored tokens per continuation, split as lm-eval's ``_encode_pair`` splits context and continuation."""
    def n(texts: list[str]) -> list[int]:
        return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]

    if not context:
        return n(continuations)
    base = n([context])[0]
    return [w - base for w in n([context + c for c in continuations])]


def add_token_counts(docs: list[dict], metadata: Mapping[str, Any] | None) -> None:
    tok = _tokenizer(metadata)
    for d in docs:
        req = requests_of(d)
        d["n_tokens"] = token_counts(tok, req.context, list(req.continuations))


def _dataset(name: str, metadata: Mapping[str, Any]) -> dict:
    return as_split(build_docs(load_facts(name, metadata), metadata))


def bear_dataset(**metadata):
    return _dataset("bear", metadata)


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
    """One record per doc, logged with --log_samples; the same record feeds every metric."""
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
    }
    scores = M.record_scores(record)
    pred = int(M.ranking(scores)[0])
    rank = M.gold_rank(scores, gold)
    record.update(pred=pred, pred_label=options[pred], gold_label=options[gold[0]], rank=rank, correct=int(rank == 0))
    return {name: record for name in METRICS}


# --- aggregations (lm-eval passes the list of records) ---------------------------

@with_stderr(M.bear_score_stderr)
def agg_bear(records):
    """BEAR score: per-template P@1 averaged over templates; stderr across templates (Table 3)."""
    return M.bear_score(records)


@with_stderr(lambda rs: M.bear_score_stderr(M.by_cardinality(rs, "1:1")))
def agg_bear_1to1(records):
    return M.bear_score(M.by_cardinality(records, "1:1"))


@with_stderr(lambda rs: M.bear_score_stderr(M.by_cardinality(rs, "1:N")))
def agg_bear_1toN(records):
    return M.bear_score(M.by_cardinality(records, "1:N"))


def _correct(records):
    return [int(M.record_rank(r) == 0) for r in records]


def _template_agg(t: int):
    def pick(records):
        return [r for r in records if int(r["template_index"]) == t]

    @with_stderr(lambda rs: M.mean_stderr(_correct(pick(rs))))
    def agg(records):
        return M.records_precision_at_k(pick(records), 1)

    agg.__name__ = f"agg_bear_t{t}"
    return agg


agg_bear_t0, agg_bear_t1, agg_bear_t2 = (_template_agg(t) for t in range(3))


def _p_at_k_agg(k: int):
    @with_stderr(lambda rs: M.mean_stderr([int(M.record_rank(r) < k) for r in rs]))
    def agg(records):
        return M.records_precision_at_k(records, k)

    agg.__name__ = f"agg_p_at_{k}"
    return agg


agg_p_at_1, agg_p_at_5, agg_p_at_10 = (_p_at_k_agg(k) for k in PRECISION_KS)

METRICS = ("bear", "bear_1to1", "bear_1toN", "bear_t0", "bear_t1", "bear_t2", "p_at_1", "p_at_5", "p_at_10")
