"""Harness glue for IC-LKE and EIC-LKE (docs/iclke.md).

Tasks (task_yamls/iclke/):

* ``belief_iclke`` / ``belief_iclke_bear`` (``IclkeTask``): one doc per test fact;
  ``multiple_choice`` output type, so lm-eval sends one ``loglikelihood`` request per
  option with the identical context σ(x, r) and continuation ``" " + option``.
* ``belief_eiclke`` / ``belief_eiclke_bear`` (``EICLKETask``): appendix F; one doc per
  test fact too, but option k of a fact is scored inside sequence k of its group,
  still as plain ``loglikelihood`` requests.
* ``reference: true`` (``belief_iclke`` only): IC-LKE as the authors' code builds and scores it
  (``reference_docs``, ``reference_requests``; docs/iclke.md, "The reference code").

``--metadata`` knobs: ``belief_tasks.families.IclkeOptions`` (the common ones, where ``max_facts_per_relation``
caps *test* facts, plus the family's), and the data source's (``belief_tasks.data.sources``).

Records, their scoring and the metric table: ``belief_tasks.scoring.iclke``.
"""

from __future__ import annotations

import logging

from belief_tasks.data import load_facts
from belief_tasks.data.sources import resolve_source
from belief_tasks.facts.budget import group_by_relation, ranked
from belief_tasks.facts.schema import FactSet, SchemaError, fact_key, sampling_key
from belief_tasks.families import ICLKE, IclkeOptions
from belief_tasks.metrics import iclke as iclke_metrics
from belief_tasks.options import KnobError
from belief_tasks.prompts import iclke as iclke_prompts
from belief_tasks.scoring.iclke import METRICS
from belief_tasks.tasks.base import (
    BeliefTask,
    DocList,
    Selection,
    as_split,
    check_relations,
    probe,
    record_design,
    select_facts,
    unpack,
)

log = logging.getLogger(__name__)

OPTIONS = IclkeOptions


def params(opts: IclkeOptions) -> iclke_prompts.Params:
    """The prompt layer's parameters from the parsed knobs."""
    return iclke_prompts.Params(
        seed=opts.seed,
        n_examples=opts.n_examples,
        max_options=opts.max_options,
        demos=opts.demos,
        eic_lead=opts.eic_lead,
        eic_every=opts.eic_every,
    )


# ---------------------------------------------------------------- docs


def _drawn_order(rel, opts: IclkeOptions):
    """A relation's facts in the order a budget draws them (``budget.ranked``: the seeded hash of the
    cross-dataset sampling key), for the ``train_split: key`` knob."""
    return lambda facts: ranked([sampling_key(f, rel) for f in facts], opts.seed)


def _splits(fs: FactSet, opts: IclkeOptions) -> tuple[list[tuple], Selection]:
    """(relation, train facts, selected test facts, the relation's test population) per relation with both, and
    the selection of test facts (``select_facts``: drawn once over every such relation, with the budget's draw)."""
    check_relations(fs, opts.relations)
    kept = []
    for rid, rel in fs.relations.items():
        if opts.relations is not None and rid not in opts.relations:
            continue
        train, test = iclke_prompts.split_relation(
            fs.facts_of(rid), opts.seed, opts.train_size, _drawn_order(rel, opts) if opts.train_split == "key" else None
        )
        if opts.reference:
            test = iclke_prompts.reference_tests(test, opts.reference_rows)
        if not train or not test:
            log.warning("IC-LKE: relation %s has %d training and %d test facts; skipped", rid, len(train), len(test))
            continue
        kept.append((rel, train, test))
    tests = FactSet(fs.source, {rel.id: rel for rel, _, _ in kept}, [f for _, _, test in kept for f in test])
    selection = select_facts(tests, opts.replace(relations=None))
    chosen, population = group_by_relation(selection), group_by_relation(selection.population)
    return [(rel, train, chosen.get(rel.id, []), population.get(rel.id, [])) for rel, train, _ in kept], selection


def _base_doc(fact, rel, options, gold_index, opts: IclkeOptions, method: str) -> dict:
    return {
        "fact_id": fact.id,
        "relation": fact.relation,
        "fact_key": fact_key(fact, rel).as_record(),
        "subject": fact.subject.label,
        "gold": fact.object.label,
        "gold_index": gold_index,
        "options": options,
        "method": method,
        "format": opts.format or iclke_prompts.DEFAULT_FORMAT[method],
    }


def iclke_docs(fs: FactSet, opts: IclkeOptions) -> DocList:
    """One doc per test fact: σ(x, r) (eq. 1) and its option set; with the budget's draw (``DocList.draw``)."""
    if opts.reference:
        return reference_docs(fs, opts)
    fmt, par = iclke_prompts.pair_format(opts.format or iclke_prompts.DEFAULT_FORMAT["iclke"]), params(opts)
    docs = []
    splits, selection = _splits(fs, opts)
    for rel, train, test, _ in splits:
        for fact in test:
            examples = iclke_prompts.choose_examples(fact, train, par)
            options, gold = iclke_prompts.option_set(fact, rel, opts.seed, opts.max_options)
            doc = _base_doc(fact, rel, options, gold, opts, "iclke")
            doc.update(
                context=fmt.render(iclke_prompts.as_pairs(examples), fact.subject.label),
                n_examples=len(examples),
                example_ids=[f.id for f in examples],
                **selection.design(fact),
            )
            docs.append(doc)
    return DocList(docs, selection.draw)


def check_reference(fs: FactSet, opts: IclkeOptions, method: str) -> None:
    """``reference: true`` is the reference code's IC-LKE on T-REx-MC, and nothing else: refused otherwise."""
    if not opts.reference:
        return
    if method == "eiclke":
        raise KnobError(
            "reference",
            "EIC-LKE has no reference code (the authors' repository runs IC-LKE only); "
            "belief_eiclke follows the paper's appendix C.2 and F (docs/iclke.md). Drop reference for it",
        )
    if opts.format is not None:
        raise KnobError(
            "format",
            "cannot be combined with reference: true, which writes the reference's own string "
            '(docs/iclke.md, "The reference code")',
        )
    if opts.demos != "relation":
        raise KnobError(
            "demos",
            "cannot be 'fact' with reference: true: the reference draws its examples once per relation (docs/iclke.md)",
        )
    if opts.reference_seed > 2**32 - 1:
        raise KnobError(
            "reference_seed", f"{opts.reference_seed} is above 2**32 - 1, the largest random_state pandas takes"
        )
    if not any(f.split == "train" for f in fs.facts) or not all(f.choices for f in fs.facts):
        raise KnobError(
            "reference",
            f"needs T-REx-MC (belief_iclke): the reference reads its train split and its "
            f"'Multiple Choices', and the data read here ({fs.source}) has no train split or no "
            "'Multiple Choices'",
        )


def reference_docs(fs: FactSet, opts: IclkeOptions) -> DocList:
    """One doc per test fact, as the reference code builds it (``iclke_prompts.reference_*``): the first
    ``reference_rows`` test rows of each relation, one pandas draw of ``n_examples`` training rows per relation
    shared by all of them, ``Multiple Choices`` then the gold; with the budget's draw, as ``iclke_docs``."""
    check_reference(fs, opts, "iclke")
    where = resolve_source("trex_mc", opts.metadata).location or fs.source
    docs = []
    splits, selection = _splits(fs, opts)
    for rel, train, test, _ in splits:
        examples = iclke_prompts.reference_examples(train, opts.n_examples, opts.reference_seed)
        for fact in test:
            options, gold = iclke_prompts.reference_options(fact)
            if len(options) > opts.max_options:
                raise SchemaError(
                    f"{len(options) - 1} choices besides the gold object make {len(options)} options, "
                    f"above max_options {opts.max_options}: reference: true keeps every one (the "
                    "reference never cuts them); raise max_options",
                    file=where,
                    row=fact.id,
                    field="Multiple Choices",
                )
            doc = _base_doc(fact, rel, options, gold, opts, "iclke")
            doc.update(
                format=iclke_prompts.REFERENCE,
                n_examples=len(examples),
                example_ids=[f.id for f in examples],
                context=iclke_prompts.reference_context(iclke_prompts.as_pairs(examples), fact.subject.label),
                **selection.design(fact),
            )
            docs.append(doc)
    return DocList(docs, selection.draw)


def reference_requests(context: str, options: list[str]) -> list[tuple[str, str]]:
    """The reference's ``loglikelihood`` requests of one fact: ``(σ, " : " + option)`` per option, then one for the
    whitespace σ ends with (``"x : "``), when it does.

    The reference scores the tokens after σ's own (LKEs.py:64-78). lm-eval moves a context's trailing whitespace
    into the continuation before tokenising (``_encode_pair``), so an option's request also scores σ's last
    token, the space; the last request is that token's log-probability, which ``process_results`` subtracts from
    every option's. The two splits agree wherever σ's tokens begin the tokens of σ + option (byte-level BPE)."""
    stripped = context.rstrip()
    requests = [(context, iclke_prompts.reference_continuation(o)) for o in options]
    if stripped != context:
        requests.append((stripped, context[len(stripped) :]))
    return requests


def eiclke_docs(fs: FactSet, opts: IclkeOptions) -> DocList:
    """One doc per test fact, carrying its group's sequence up to its slot (appendix F).

    Under a budget the groups are those of the full run (formed over every test fact of the relation)
    and only the drawn facts' slots are scored: a drawn fact sees the same sequence as in the full
    run, whichever other facts are drawn, so budgets share requests and estimate the full run's value."""
    check_reference(fs, opts, "eiclke")
    docs = []
    splits, selection = _splits(fs, opts)
    for rel, train, test, population in splits:
        drawn = {f.id for f in test}
        for group in iclke_prompts.eic_groups(rel, train, population, params(opts)):
            for slot in (s for s in group if s.fact.id in drawn):
                doc = _base_doc(slot.fact, rel, slot.options, slot.gold_index, opts, "eiclke")
                doc.update(
                    group=slot.group,
                    slot=slot.index,
                    examples=slot.examples,
                    prior=[list(p) for p in slot.prior],
                    n_examples=len(slot.examples) + len(slot.prior),
                    **selection.design(slot.fact),
                )
                docs.append(doc)
    return DocList(docs, selection.draw)


def _dataset(dataset: str, build, opts: IclkeOptions):
    return as_split(build(load_facts(dataset, opts.metadata), opts))


@probe("belief_iclke", "trex_mc")
def iclke_trex_mc(opts: IclkeOptions):
    return _dataset("trex_mc", iclke_docs, opts)


@probe("belief_iclke_bear", "bear_big")
def iclke_bear(opts: IclkeOptions):
    return _dataset("bear_big", iclke_docs, opts)


@probe("belief_eiclke", "trex_mc")
def eiclke_trex_mc(opts: IclkeOptions):
    return _dataset("trex_mc", eiclke_docs, opts)


@probe("belief_eiclke_bear", "bear_big")
def eiclke_bear(opts: IclkeOptions):
    return _dataset("bear_big", eiclke_docs, opts)


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
    fmt = iclke_prompts.pair_format(doc["format"])
    return fmt.render(iclke_prompts.eic_pairs(unpack(doc, "examples"), unpack(doc, "prior"), k), doc["subject"])


class IclkeTask(BeliefTask[IclkeOptions]):
    """``belief_iclke*``: a ``multiple_choice`` task, every option after the same σ(x, r)."""

    FAMILY = ICLKE.name
    OPTIONS = OPTIONS
    WHOLE_CONTEXT = "its in-context examples"

    def construct_requests(self, doc, ctx, **kwargs):
        """lm-eval's ``multiple_choice`` requests; under ``reference: true`` the reference's own
        (``reference_requests``)."""
        if doc.get("format") != iclke_prompts.REFERENCE:
            return super().construct_requests(doc, ctx, **kwargs)
        return [
            self.instance("loglikelihood", doc, args, i, kwargs)
            for i, args in enumerate(reference_requests(ctx, doc_to_choice(doc)))
        ]


class EICLKETask(IclkeTask):
    """``belief_eiclke*``: option k is scored after its own context, sequence k of the fact's
    group (appendix F). Requests stay plain ``loglikelihood`` ones, so every backend runs them."""

    def construct_requests(self, doc, ctx, **kwargs):
        return [
            self.instance(
                "loglikelihood", doc, (eic_context(doc, k), iclke_prompts.TARGET_DELIMITER + option), k, kwargs
            )
            for k, option in enumerate(doc_to_choice(doc))
        ]


# ---------------------------------------------------------------- records


def process_results(doc, results) -> dict:
    """One ``IclkeRecord`` per test fact, under every metric name (aggregations read the same fields)."""
    logprobs = [float(r[0]) if isinstance(r, (tuple, list)) else float(r) for r in results]
    gold = int(doc["gold_index"])
    reference = doc.get("format") == iclke_prompts.REFERENCE
    if reference and len(logprobs) > len(unpack(doc, "options")):  # σ's trailing space, scored apart
        logprobs = [lp - logprobs[-1] for lp in logprobs[:-1]]
    # the reference's first maximum (its gold is last, so a tie is wrong either way); ours: None on a tie
    pred = iclke_metrics.first_maximum(logprobs) if reference else iclke_metrics.prediction(logprobs)
    record = {
        "relation": doc["relation"],
        "fact_id": doc["fact_id"],
        "fact_key": unpack(doc, "fact_key"),
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
        "gold_prob": iclke_metrics.gold_confidence(logprobs, gold),
        "pred_prob": iclke_metrics.prediction_confidence(logprobs),
        "n_examples": int(doc["n_examples"]),
    }
    if doc.get("method") == "eiclke":
        record.update(group=doc["group"], slot=int(doc["slot"]))
    record.update(record_design(doc))
    return {name: record for name in METRICS}
