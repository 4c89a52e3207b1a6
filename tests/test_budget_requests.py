"""A drawn fact's requests do not depend on which other facts are drawn, in every family: so two
budgets share their common facts' requests (``--use_cache``), and a budget's facts are asked
exactly what the full run asks them (the estimates target the full run's value)."""

from __future__ import annotations

import pytest

from belief_tasks.data import load_facts
from belief_tasks.options import parse_options
from belief_tasks.tasks import bear, belief_icl, iclke, monitor
from belief_tasks.tasks.base import DESIGN_FIELDS, as_split, unpack

SAMPLE = {"source": "sample"}


def _common(small: list[dict], large: list[dict], key) -> list[tuple[dict, dict]]:
    by_key = {key(d): d for d in large}
    pairs = [(d, by_key[key(d)]) for d in small]
    assert pairs and all(k in by_key for k in map(key, small))  # nested
    return pairs


def _without_design(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in DESIGN_FIELDS}


@pytest.mark.parametrize("style,context", [("mp", "4random"), ("qa", "4relation"), ("mp", "4template")])
def test_belief_prompts_and_samples_of_a_pair_do_not_depend_on_the_draw(style, context):
    md = {**SAMPLE, "confidence_prompts": 200, "confidence_samples": 3}
    opts = lambda **more: parse_options(belief_icl.OPTIONS, {**md, **more})  # noqa: E731
    small = belief_icl.build_docs(style, context, opts(budget=0.05))
    large = belief_icl.build_docs(style, context, opts(budget=0.3))
    full = belief_icl.build_docs(style, context, opts())
    for a, b in _common(small, large, lambda d: d["fact_id"]):
        assert _without_design(a) == _without_design(b)
        assert belief_icl.prompts_of(a, opts(budget=0.05)) == belief_icl.prompts_of(b, opts(budget=0.3))
    # the confidence subsample is the full run's: a pair is sampled at a budget iff it is in the full run
    sampled_full = {d["fact_id"] for d in full if d["sampled"] is not None}
    assert {d["fact_id"] for d in large if d["sampled"] is not None} == sampled_full & {d["fact_id"] for d in large}
    census = belief_icl.build_docs(style, context, opts(budget=1.0))
    assert [_without_design(d) for d in census] == full


def test_bear_requests_of_a_fact_do_not_depend_on_the_draw():
    fs = load_facts("bear", SAMPLE)
    small, large = (bear.build_docs(fs, parse_options(bear.OPTIONS, {**SAMPLE, "budget": b})) for b in (0.05, 0.25))
    for a, b in _common(small, large, lambda d: d["doc_id"]):
        assert _without_design(a) == _without_design(b)
        assert bear.requests_of(a) == bear.requests_of(b)
    assert [
        _without_design(d) for d in bear.build_docs(fs, parse_options(bear.OPTIONS, {**SAMPLE, "budget": 1.0}))
    ] == bear.build_docs(fs, parse_options(bear.OPTIONS, SAMPLE))


@pytest.mark.parametrize("builder", [iclke.iclke_docs, iclke.eiclke_docs])
@pytest.mark.parametrize("demos", ["relation", "fact"])
def test_iclke_inputs_of_a_test_fact_do_not_depend_on_the_draw(builder, demos):
    """IC-LKE's examples come from the training split (never the test facts); EIC-LKE's groups are the
    full run's, so a drawn fact's sequence holds the same earlier test facts whatever else is drawn."""
    md = {**SAMPLE, "n_examples": 6, "max_options": 5, "train_size": 20, "demos": demos, "eic_lead": 3, "eic_every": 2}
    fs = load_facts("bear_big", md)
    small, large = (builder(fs, parse_options(iclke.OPTIONS, {**md, "budget": b})) for b in (0.1, 0.4))
    full = builder(fs, parse_options(iclke.OPTIONS, md))
    for a, b in _common(small, large, lambda d: d["fact_id"]):
        assert _without_design(a) == _without_design(b)
        assert _contexts(a) == _contexts(b)
    by_id = {d["fact_id"]: d for d in full}
    assert all(_without_design(d) == by_id[d["fact_id"]] for d in large)


def _contexts(doc: dict) -> list[str]:
    """What the model reads before each option (IC-LKE: one context; EIC-LKE: sequence k per option k)."""
    if doc["method"] == "eiclke":
        return [iclke.eic_context(doc, k) for k in range(len(iclke.doc_to_choice(doc)))]
    return [iclke.doc_to_text(doc)]


def test_monitor_anchors_of_a_fact_do_not_depend_on_the_draw():
    fs = load_facts("fktc", SAMPLE)
    small, large = (
        monitor.build_docs(fs, parse_options(monitor.OPTIONS, {**SAMPLE, "budget": b})) for b in (0.05, 0.3)
    )
    for a, b in _common(small, large, lambda d: d["fact_id"]):
        assert _without_design(a) == _without_design(b)
        assert unpack(a, "anchors") == unpack(b, "anchors")


def test_docs_carry_the_draw_and_the_design_it_gives_each_doc():
    """The draw is computed once, by the documents function, and handed on with the docs (``DocList.draw``):
    the results JSON's summary is its own, and each doc's design fields (which the records copy for
    ``belief-report``) agree with it."""
    fs = load_facts("bear", SAMPLE)
    docs = bear.build_docs(fs, parse_options(bear.OPTIONS, {**SAMPLE, "budget": 0.05, "seed": 5}))
    summary = docs.draw.summary()
    assert summary["budget"] == 0.05 and summary["seed"] == 5
    for rid, rel in summary["relations"].items():
        assert rel["population"] == len(fs.facts_of(rid))
        assert rel["drawn"] == len({d["fact_id"] for d in docs if d["relation"] == rid})
        assert all(
            (d["population"], d["drawn"]) == (rel["population"], rel["drawn"]) for d in docs if d["relation"] == rid
        )
    assert summary["facts_drawn"] == len({d["fact_id"] for d in docs})
    assert as_split(docs)["test"].draw is docs.draw  # every relation has docs: the draw as it was made
    assert bear.build_docs(fs, parse_options(bear.OPTIONS, SAMPLE)).draw is None


def test_a_relation_without_docs_leaves_the_draw():
    """A relation a task makes no document of (no template of the style, say) is no part of its design."""
    fs = load_facts("bear", SAMPLE)
    docs = bear.build_docs(fs, parse_options(bear.OPTIONS, {**SAMPLE, "budget": 0.2}))
    kept = [d for d in docs if d["relation"] != "P36"]
    kept = type(docs)(kept, docs.draw)
    draw = as_split(kept)["test"].draw
    assert "P36" in docs.draw.population and "P36" not in draw.population and "P36" not in draw.keys_of
    assert draw.summary()["facts_drawn"] == docs.draw.summary()["facts_drawn"] - docs.draw.drawn["P36"]
    assert list(draw.population) == [r for r in docs.draw.population if r != "P36"]
