"""Harness glue for IC-LKE and EIC-LKE (docs/iclke.md).

Tasks (task_yamls/iclke/):

* ``belief_iclke`` / ``belief_iclke_bear``: one doc per test fact; ``multiple_choice``
  output type, so lm-eval sends one ``loglikelihood`` request per option with the
  identical context σ(x, r) and continuation ``" " + option``.
* ``belief_eiclke`` / ``belief_eiclke_bear``: appendix F; one doc per test fact
  too, but option k of a fact is scored inside sequence k of its group
  (``EICLKETask.construct_requests``), still as plain ``loglikelihood`` requests.

Settings come from ``--metadata`` (or the YAML's ``metadata:``): ``seed``,
``relations``, ``max_facts_per_relation`` (caps *test* facts), ``n_examples``,
``max_options``, ``train_size``, ``format`` ("space" | "colon_comma"), ``demos``
("relation" | "fact"), ``eic_lead``, ``eic_every``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.metrics import iclke as M
from belief_tasks.prompts import iclke as P
from belief_tasks.schema import FactSet
from belief_tasks.options import COMMON, parse_options
from belief_tasks.tasks.base import as_split, select_facts, unpack, with_stderr

log = logging.getLogger(__name__)

_INT_KEYS = ("n_examples", "max_options", "train_size", "eic_lead", "eic_every")


def settings_from(metadata: Mapping[str, Any] | None) -> P.Settings:
    md = metadata or {}
    opts = parse_options(COMMON, md)
    kw: dict[str, Any] = {"seed": opts.seed}
    for key in _INT_KEYS:
        if md.get(key) not in (None, ""):
            kw[key] = int(md[key])
            if kw[key] < (0 if key == "n_examples" else 1):
                raise ValueError(f"IC-LKE setting {key} must be positive, got {md[key]!r}")
    for key in ("format", "demos"):
        if md.get(key) not in (None, ""):
            kw[key] = str(md[key])
    settings = P.Settings(**kw)
    P.pair_format(settings.format)  # fail early on an unknown format
    if settings.demos not in ("relation", "fact"):
        raise ValueError(f"IC-LKE setting demos must be 'relation' or 'fact', got {settings.demos!r}")
    return settings


def _splits(fs: FactSet, metadata: Mapping[str, Any], settings: P.Settings):
    """(relation, train facts, selected test facts) per relation with both."""
    opts = parse_options(COMMON, metadata)
    if opts.relations is not None:
        unknown = sorted(set(opts.relations) - set(fs.relations))
        if unknown:
            raise ValueError(f"unknown relations {unknown} for {fs.source}; known: {sorted(fs.relations)}")
    out = []
    for rid, rel in fs.relations.items():
        if opts.relations is not None and rid not in opts.relations:
            continue
        train, test = P.split_relation(fs.facts_of(rid), settings.seed, settings.train_size)
        if not train or not test:
            log.warning("IC-LKE: relation %s has %d training and %d test facts; skipped", rid, len(train), len(test))
            continue
        test = select_facts(FactSet(fs.source, {rid: rel}, test), opts.replace(relations=None))
        out.append((rel, train, test))
    return out


def _base_doc(fact, options, gold_index, settings: P.Settings, method: str) -> dict:
    return {
        "fact_id": fact.id,
        "relation": fact.relation,
        "subject": fact.subject.label,
        "gold": fact.object.label,
        "gold_index": gold_index,
        "options": options,
        "method": method,
        "format": settings.format,
    }


def iclke_docs(fs: FactSet, metadata: Mapping[str, Any]) -> list[dict]:
    """One doc per test fact: σ(x, r) (eq. 1) and its option set."""
    settings = settings_from(metadata)
    fmt = P.pair_format(settings.format)
    docs = []
    for rel, train, test in _splits(fs, metadata, settings):
        for fact in test:
            examples = P.choose_examples(fact, train, settings)
            options, gold = P.option_set(fact, rel, settings.seed, settings.max_options)
            doc = _base_doc(fact, options, gold, settings, "iclke")
            doc.update(context=fmt.render(P.as_pairs(examples), fact.subject.label), n_examples=len(examples),
                       example_ids=[f.id for f in examples])
            docs.append(doc)
    return docs


def eiclke_docs(fs: FactSet, metadata: Mapping[str, Any]) -> list[dict]:
    """One doc per test fact, carrying its group's sequence up to its slot (appendix F)."""
    settings = settings_from(metadata)
    docs = []
    for rel, train, test in _splits(fs, metadata, settings):
        for group in P.eic_groups(rel, train, test, settings):
            for slot in group:
                doc = _base_doc(slot.fact, slot.options, slot.gold_index, settings, "eiclke")
                doc.update(group=slot.group, slot=slot.index, examples=slot.examples,
                           prior=[list(p) for p in slot.prior], n_examples=len(slot.examples) + len(slot.prior))
                docs.append(doc)
    return docs


# ---------------------------------------------------------------- custom_dataset entry points


def _dataset(dataset: str, build, metadata: dict):
    return as_split(build(load_facts(dataset, metadata), metadata))


def iclke_trex_mc(**metadata):
    return _dataset("trex_mc", iclke_docs, metadata)


def iclke_bear(**metadata):
    return _dataset("bear_big", iclke_docs, metadata)


def eiclke_trex_mc(**metadata):
    return _dataset("trex_mc", eiclke_docs, metadata)


def eiclke_bear(**metadata):
    return _dataset("bear_big", eiclke_docs, metadata)


# ---------------------------------------------------------------- doc fields


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


# ---------------------------------------------------------------- records and aggregations


def process_results(doc, results) -> dict:
    """One record per test fact, under every metric name (aggregations read the same fields)."""
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
    return {name: record for name in METRICS}


def _lp_gold(records):
    lps, gold, _ = M.record_arrays(records)
    return lps, gold


def _acc_stderr(records) -> float:
    return M.binomial_stderr([float(r["correct"]) for r in records])


@with_stderr(_acc_stderr)
def acc(records) -> float:
    return M.accuracy(*_lp_gold(records))


@with_stderr(lambda records: M.macro_accuracy_stderr(records))
def acc_macro(records) -> float:
    return M.macro_accuracy(records)


def _mean_stderr(values) -> float:
    import numpy as np

    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else float("nan")


@with_stderr(lambda records: _mean_stderr([M.gold_confidence(r["logprobs"], r["gold_index"]) for r in records]))
def gold_prob(records) -> float:
    import numpy as np

    return float(np.mean([M.gold_confidence(r["logprobs"], r["gold_index"]) for r in records]))


def _acc_at(k: float):
    def stderr(records) -> float:
        kept = [float(r["correct"]) for r in records if M.prediction_confidence(r["logprobs"]) >= k]
        return M.binomial_stderr(kept)

    @with_stderr(stderr)
    def agg(records) -> float:
        return M.accuracy_at_k(*_lp_gold(records), k)

    agg.__name__ = f"acc_at_{int(round(k * 100))}"
    return agg


for _k in M.THRESHOLDS:
    globals()[f"acc_at_{int(round(_k * 100))}"] = _acc_at(_k)

#: metric name -> aggregation (the YAML wires the same names)
METRICS = {"acc": acc, "acc_macro": acc_macro, "gold_prob": gold_prob,
           **{f"acc@{k}": globals()[f"acc_at_{int(round(k * 100))}"] for k in M.THRESHOLDS}}


# ---------------------------------------------------------------- EIC-LKE task class


def _eic_task_class():
    from lm_eval.api.instance import Instance
    from lm_eval.api.task import ConfigurableTask

    class EICLKETask(ConfigurableTask):
        """A ``multiple_choice`` task whose option k is scored after its own context:
        sequence k of the fact's group (appendix F). Requests stay plain
        ``loglikelihood`` ones, so every backend runs them."""

        def __init__(self, config: dict | None = None, **kwargs) -> None:
            config = {k: v for k, v in (config or {}).items() if k != "class"}
            super().__init__(config=config, **kwargs)

        def construct_requests(self, doc, ctx, **kwargs):
            kwargs.pop("apply_chat_template", None)
            kwargs.pop("chat_template", None)
            return [
                Instance(request_type="loglikelihood", doc=doc,
                         arguments=(eic_context(doc, k), P.TARGET_DELIMITER + option), idx=k, **kwargs)
                for k, option in enumerate(doc_to_choice(doc))
            ]

    return EICLKETask


def __getattr__(name):  # lm-eval is imported only when the task class is asked for
    if name == "EICLKETask":
        cls = _eic_task_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
