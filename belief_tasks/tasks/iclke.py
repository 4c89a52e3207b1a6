"""Harness glue for IC-LKE and EIC-LKE (docs/iclke.md).

Tasks (task_yamls/iclke/):

* ``belief_iclke`` / ``belief_iclke_bear`` (``IclkeTask``): one doc per test fact;
  ``multiple_choice`` output type, so lm-eval sends one ``loglikelihood`` request per
  option with the identical context σ(x, r) and continuation ``" " + option``.
* ``belief_eiclke`` / ``belief_eiclke_bear`` (``EICLKETask``): appendix F; one doc per
  test fact too, but option k of a fact is scored inside sequence k of its group,
  still as plain ``loglikelihood`` requests.

``--metadata`` knobs: ``KNOBS`` below (the common ones, where ``max_facts_per_relation``
caps *test* facts, plus the family's), and the data source's (``belief_tasks.sources``).

Records (``belief_tasks.records.IclkeRecord``) -> arrays for ``belief_tasks.metrics.iclke``:
``columns``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import numpy as np

from belief_tasks.data import load_facts
from belief_tasks.metrics import iclke as M
from belief_tasks.metrics.budgeted import iclke as budgeted_iclke
from belief_tasks.metrics.intervals import Units
from belief_tasks.metrics.stats import mean_stderr
from belief_tasks.options import COMMON, Knob, Options, parse_options
from belief_tasks.prompts import iclke as P
from belief_tasks.schema import FactSet
from belief_tasks.tasks.base import BeliefTask, as_split, check_relations, design_of, probe, select_facts, unpack, with_stderr

log = logging.getLogger(__name__)

KNOBS: tuple[Knob, ...] = COMMON + (
    Knob("n_examples", "int", 50, "n in-context examples per test fact (eq. 1, appendix C.1)", minimum=0),
    Knob("max_options", "int", 100, "options per test fact: the gold object + up to max_options - 1 alternatives",
         minimum=1),
    Knob("train_size", "int", 100, "training facts per relation, for datasets without a train split", minimum=1),
    Knob("format", "str", None, "how pairs are joined (default: the method's own, 'space' for IC-LKE, section 2.2, "
         "'space_comma' for EIC-LKE, appendix C.2; 'colon_comma': the reference code)", choices=tuple(P.FORMATS)),
    Knob("demos", "str", "relation", "examples: one seeded order per relation, or drawn per test fact",
         choices=P.DEMOS),
    Knob("eic_lead", "int", 50, "EIC-LKE: training facts before the first test fact (appendix C.2)", minimum=1),
    Knob("eic_every", "int", 5, "EIC-LKE: training facts between two test facts", minimum=1),
)


def params(opts: Options) -> P.Params:
    """The prompt layer's parameters from the parsed knobs."""
    return P.Params(seed=opts.seed, n_examples=opts.n_examples, max_options=opts.max_options, demos=opts.demos,
                    eic_lead=opts.eic_lead, eic_every=opts.eic_every)


# ---------------------------------------------------------------- docs


def _splits(fs: FactSet, opts: Options):
    """(relation, train facts, selected test facts) per relation with both; the selection
    (``select_facts``) knows the relation's test population and, under a budget, its draw."""
    check_relations(fs, opts.relations)
    out = []
    for rid, rel in fs.relations.items():
        if opts.relations is not None and rid not in opts.relations:
            continue
        train, test = P.split_relation(fs.facts_of(rid), opts.seed, opts.train_size)
        if not train or not test:
            log.warning("IC-LKE: relation %s has %d training and %d test facts; skipped", rid, len(train), len(test))
            continue
        out.append((rel, train, select_facts(FactSet(fs.source, {rid: rel}, test), opts.replace(relations=None))))
    return out


def _base_doc(fact, options, gold_index, opts: Options, method: str) -> dict:
    return {
        "fact_id": fact.id,
        "relation": fact.relation,
        "subject": fact.subject.label,
        "gold": fact.object.label,
        "gold_index": gold_index,
        "options": options,
        "method": method,
        "format": opts.format or P.DEFAULT_FORMAT[method],
    }


def iclke_docs(fs: FactSet, metadata: Mapping[str, Any] | None) -> list[dict]:
    """One doc per test fact: σ(x, r) (eq. 1) and its option set."""
    opts = parse_options(KNOBS, metadata)
    fmt, par = P.pair_format(opts.format or P.DEFAULT_FORMAT["iclke"]), params(opts)
    docs = []
    for rel, train, test in _splits(fs, opts):
        for fact in test:
            examples = P.choose_examples(fact, train, par)
            options, gold = P.option_set(fact, rel, opts.seed, opts.max_options)
            doc = _base_doc(fact, options, gold, opts, "iclke")
            doc.update(context=fmt.render(P.as_pairs(examples), fact.subject.label), n_examples=len(examples),
                       example_ids=[f.id for f in examples], **test.design(fact))
            docs.append(doc)
    return docs


def eiclke_docs(fs: FactSet, metadata: Mapping[str, Any] | None) -> list[dict]:
    """One doc per test fact, carrying its group's sequence up to its slot (appendix F).

    Under a budget the groups are those of the full run (formed over every test fact of the relation)
    and only the drawn facts' slots are scored: a drawn fact sees the same sequence as in the full
    run, whichever other facts are drawn, so budgets share requests and estimate the full run's value."""
    opts = parse_options(KNOBS, metadata)
    docs = []
    for rel, train, test in _splits(fs, opts):
        drawn = {f.id for f in test}
        for group in P.eic_groups(rel, train, test.population, params(opts)):
            for slot in (s for s in group if s.fact.id in drawn):
                doc = _base_doc(slot.fact, slot.options, slot.gold_index, opts, "eiclke")
                doc.update(group=slot.group, slot=slot.index, examples=slot.examples,
                           prior=[list(p) for p in slot.prior], n_examples=len(slot.examples) + len(slot.prior),
                           **test.design(slot.fact))
                docs.append(doc)
    return docs


def _dataset(dataset: str, build, metadata: dict):
    return as_split(build(load_facts(dataset, metadata), metadata))


@probe("belief_iclke", "trex_mc")
def iclke_trex_mc(**metadata):
    return _dataset("trex_mc", iclke_docs, metadata)


@probe("belief_iclke_bear", "bear_big")
def iclke_bear(**metadata):
    return _dataset("bear_big", iclke_docs, metadata)


@probe("belief_eiclke", "trex_mc")
def eiclke_trex_mc(**metadata):
    return _dataset("trex_mc", eiclke_docs, metadata)


@probe("belief_eiclke_bear", "bear_big")
def eiclke_bear(**metadata):
    return _dataset("bear_big", eiclke_docs, metadata)


# ---------------------------------------------------------------- doc fields and tasks


def doc_to_text(doc) -> str:
    """σ(x, r) for IC-LKE; for EIC-LKE the context of sequence 0 (what ``--write_out`` shows)."""
    if doc.get("method") == "eiclke":
        return eic_context(doc, 0)
    return doc["context"]


def doc_to_choice(doc) -> list[str]:
    return unpack(doc, "options")


def doc_to_target(doc) -> int:
    return int(doc["gold_index"])


def eic_context(doc, k: int) -> str:
    """The input before option k of this fact: sequence k of its group, up to its subject."""
    fmt = P.pair_format(doc["format"])
    return fmt.render(P.eic_pairs(unpack(doc, "examples"), unpack(doc, "prior"), k), doc["subject"])


class IclkeTask(BeliefTask):
    """``belief_iclke*``: a ``multiple_choice`` task, every option after the same σ(x, r)."""

    FAMILY = "iclke"
    KNOBS = KNOBS
    WHOLE_CONTEXT = "its in-context examples"


class EICLKETask(IclkeTask):
    """``belief_eiclke*``: option k is scored after its own context, sequence k of the fact's
    group (appendix F). Requests stay plain ``loglikelihood`` ones, so every backend runs them."""

    def construct_requests(self, doc, ctx, **kwargs):
        return [self.instance("loglikelihood", doc, (eic_context(doc, k), P.TARGET_DELIMITER + option), k, kwargs)
                for k, option in enumerate(doc_to_choice(doc))]


# ---------------------------------------------------------------- records and aggregations


def process_results(doc, results) -> dict:
    """One ``IclkeRecord`` per test fact, under every metric name (aggregations read the same fields)."""
    logprobs = [float(r[0]) if isinstance(r, (tuple, list)) else float(r) for r in results]
    gold = int(doc["gold_index"])
    pred = M.prediction(logprobs)
    record = {
        "relation": doc["relation"],
        "fact_id": doc["fact_id"],
        "template_id": f"{doc['method']}-{doc['format']}",
        "subject_form": "label",
        "method": doc["method"],
        "subject": doc["subject"],
        "gold": doc["gold"],
        "gold_index": gold,
        "options": unpack(doc, "options"),
        "logprobs": logprobs,
        "prediction": pred,
        "correct": pred == gold,
        "gold_prob": M.gold_confidence(logprobs, gold),
        "pred_prob": M.prediction_confidence(logprobs),
        "n_examples": int(doc["n_examples"]),
    }
    if doc.get("method") == "eiclke":
        record.update(group=doc["group"], slot=int(doc["slot"]))
    record.update(design_of(doc))
    return {name: record for name in METRICS}


def columns(records: Sequence[Mapping]) -> tuple[list[list[float]], list[int], list[str]]:
    """(option log-probabilities per fact, gold indices, relations): the arrays ``metrics.iclke`` takes."""
    return [r["logprobs"] for r in records], [int(r["gold_index"]) for r in records], [r["relation"] for r in records]


def budget_units(records: Sequence[Mapping]) -> Units:
    """Per-fact columns of a run's records for its budgeted estimates (``metrics.budgeted.iclke``)."""
    return budgeted_iclke.units([r["fact_id"] for r in records], *columns(records))


def _lp_gold(records):
    lps, gold, _ = columns(records)
    return lps, gold


@with_stderr(lambda records: M.accuracy_stderr(*_lp_gold(records)))
def acc(records) -> float:
    return M.accuracy(*_lp_gold(records))


@with_stderr(lambda records: M.macro_accuracy_stderr(*columns(records)))
def acc_macro(records) -> float:
    return M.macro_accuracy(*columns(records))


@with_stderr(lambda records: mean_stderr(M.gold_confidences(*_lp_gold(records))))
def gold_prob(records) -> float:
    return float(np.mean(M.gold_confidences(*_lp_gold(records))))


def _acc_at(k: float):
    @with_stderr(lambda records: M.accuracy_at_k_stderr(*_lp_gold(records), k))
    def agg(records) -> float:
        return M.accuracy_at_k(*_lp_gold(records), k)

    agg.__name__ = agg.__qualname__ = f"acc_at_{int(round(k * 100))}"
    return agg


_ACC_AT = tuple(_acc_at(k) for k in M.THRESHOLDS)
acc_at_10, acc_at_20, acc_at_30, acc_at_40, acc_at_50, acc_at_60, acc_at_70, acc_at_80, acc_at_90 = _ACC_AT

#: metric name -> (aggregation, higher is better); ``_iclke_common.yaml`` lists the same names
METRICS = {
    "acc": (acc, True),
    "acc_macro": (acc_macro, True),
    "gold_prob": (gold_prob, True),
    **{f"acc@{k}": (agg, True) for k, agg in zip(M.THRESHOLDS, _ACC_AT)},
}
