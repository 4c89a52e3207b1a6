"""BELIEF-ICL prompt construction against the papers' appendix examples (v3 appendix E, v1 A.4)."""

from __future__ import annotations

import pytest

from belief_tasks.facts.schema import Entity, Fact, SchemaError, Template
from belief_tasks.options import parse_options
from belief_tasks.prompts import belief as P
from belief_tasks.tasks.belief_icl import OPTIONS, build_docs, prompts_of

# The appendix's P361-like relation ("part of") and its facts.
CONSISTS = Template("P361_t0", "[Y] consists of [X].", "statement", True)
GROUP_Q = Template("P361_t1", "What is the overarching group for [X]? [Y].", "question", True)
RELATE_Q = Template("P361_t2", "To whom does [X] relate? [Y].", "question", True)
RESPONSIBLE_Q = Template("P361_t3", "Who is responsible for [X]? [Y].", "question", True)
PART_Q = Template("P361_t4", "What group is [X] a part of? [Y].", "question", True)
TEMPLATES = (CONSISTS, GROUP_Q, RELATE_Q, RESPONSIBLE_Q, PART_Q)


def fact(i: int, subject: str, obj: str, relation: str = "P361") -> Fact:
    return Fact(f"{relation}_{i}", relation, Entity(subject), (Entity(obj),))


DEMO_FACTS = [
    fact(1, "Panzer Division Kempf", "Wehrmacht"),
    fact(2, "Mount Bulusan", "Luzon"),
    fact(3, "Army National Guard", "National Guard"),
    fact(4, "pharmacy", "biology"),
]
TARGET = fact(5, "environmental factors", "ecology")

E1_ZERO_SHOT = "Predict the [MASK] in each sentence in one word.\nQ: [MASK] consists of LAUPT.\nA:"
E3_4RELATION = """Predict the [MASK] in each sentence in one word.
Q: What is the overarching group for Panzer Division Kempf? [MASK].
A: Wehrmacht.
Q: To whom does Mount Bulusan relate? [MASK].
A: Luzon.
Q: Who is responsible for Army National Guard? [MASK].
A: National Guard.
Q: What group is pharmacy a part of? [MASK].
A: biology.
Q: [MASK] consists of environmental factors.
A:"""
E4_4TEMPLATE = """Predict the [MASK] in each sentence in one word.
Q: [MASK] consists of Panzer Division Kempf.
A: Wehrmacht.
Q: [MASK] consists of Mount Bulusan.
A: Luzon.
Q: [MASK] consists of Army National Guard.
A: National Guard.
Q: [MASK] consists of pharmacy.
A: biology.
Q: [MASK] consists of environmental factors.
A:"""


def demo(f: Fact, t: Template, style: str) -> P.Demonstration:
    return P.Demonstration(f.id, t.id, P.query(t, f.subject.label, style), f.object.label)


def test_zero_shot_matches_appendix_e1():
    assert P.render("mp", [], P.query(CONSISTS, "LAUPT", "mp")) == E1_ZERO_SHOT


def test_4relation_matches_appendix_e3():
    demos = [demo(f, t, "mp") for f, t in zip(DEMO_FACTS, (GROUP_Q, RELATE_Q, RESPONSIBLE_Q, PART_Q))]
    assert P.render("mp", demos, P.query(CONSISTS, "environmental factors", "mp")) == E3_4RELATION


def test_4template_matches_appendix_e4():
    demos = [demo(f, CONSISTS, "mp") for f in DEMO_FACTS]
    assert P.render("mp", demos, P.query(CONSISTS, "environmental factors", "mp")) == E4_4TEMPLATE


def test_qa_style_drops_the_answer_slot_and_uses_the_qa_instruction():
    demos = [demo(DEMO_FACTS[0], GROUP_Q, "qa")]
    assert P.render("qa", demos, P.query(RELATE_Q, "Mount Bulusan", "qa")) == (
        "Answer each question in one word.\n"
        "Q: What is the overarching group for Panzer Division Kempf?\n"
        "A: Wehrmacht.\n"
        "Q: To whom does Mount Bulusan relate?\n"
        "A:"
    )
    with pytest.raises(ValueError):
        P.query(CONSISTS, "x", "qa")  # a statement has no question form


def test_answer_gets_exactly_one_period():
    assert P.answer_text("Nanjing") == "Nanjing."
    assert P.answer_text("Washington, D.C.") == "Washington, D.C."


def _pools(facts):
    by_rel: dict = {}
    for f in facts:
        by_rel.setdefault(f.relation, []).append(f)
    return by_rel


def test_4template_draws_the_other_facts_of_the_relation_with_the_target_template():
    facts = DEMO_FACTS + [TARGET]
    demos = P.demonstrations(
        "4template",
        "mp",
        TARGET,
        CONSISTS,
        facts_by_relation=_pools(facts),
        all_facts=facts,
        templates={"P361": TEMPLATES},
        seed=1,
    )
    # the relation has exactly four other facts, so the demonstrations are those, in a seeded order
    assert sorted(d.fact_id for d in demos) == sorted(f.id for f in DEMO_FACTS)
    prompt = P.render("mp", demos, P.query(CONSISTS, "environmental factors", "mp"))
    assert sorted(prompt.split("\n")[1:-2]) == sorted(E4_4TEMPLATE.split("\n")[1:-2])
    assert prompt.endswith("Q: [MASK] consists of environmental factors.\nA:")


def test_demonstrations_never_hold_the_probed_pair_and_are_seeded():
    facts = [fact(i, f"s{i}", f"o{i}", rel) for rel in ("P1", "P2", "P3") for i in range(6)]
    templates = {
        rel: (Template(f"{rel}_a", "[X] a [Y].", "statement"), Template(f"{rel}_b", "Is [X] b? [Y].", "question"))
        for rel in ("P1", "P2", "P3")
    }
    kw = dict(facts_by_relation=_pools(facts), all_facts=facts, templates=templates)
    relations_seen = set()
    for target in facts:
        t = templates[target.relation][0]
        for context in ("4random", "4relation", "4template"):
            demos = P.demonstrations(context, "mp", target, t, seed=5, **kw)
            assert len(demos) == 4
            assert target.id not in {d.fact_id for d in demos}
            assert len({d.fact_id for d in demos}) == 4
            assert demos == P.demonstrations(context, "mp", target, t, seed=5, **kw)
            ids = {d.fact_id for d in demos}
            if context != "4random":
                assert all(i.startswith(target.relation + "_") for i in ids)
            else:
                relations_seen |= {i.split("_")[0] for i in ids}
            if context == "4template":
                assert {d.template_id for d in demos} == {t.id}
    assert relations_seen == {"P1", "P2", "P3"}  # 4-random mixes relations
    assert P.demonstrations("zeroshot", "mp", facts[0], templates["P1"][0], seed=5, **kw) == []
    changed = [
        P.demonstrations("4random", "mp", f, templates[f.relation][0], seed=6, **kw)
        != P.demonstrations("4random", "mp", f, templates[f.relation][0], seed=5, **kw)
        for f in facts
    ]
    assert any(changed)


# ---------------------------------------------------------------- documents on the bundled sample

SAMPLE = {"source": "sample", "relations": "P36"}


def prompts(style: str, context: str, metadata: dict) -> list[dict]:
    """Every prompt of a task's pair documents, in request order."""
    opts = parse_options(OPTIONS, metadata)
    return [p for d in build_docs(style, context, opts) for p in prompts_of(d, opts)]


def test_mp_uses_manual_templates_by_default_and_all_on_request():
    from belief_tasks.data import load_facts

    rel = load_facts("myriadlama", SAMPLE).relations["P36"]
    facts = load_facts("myriadlama", SAMPLE).facts_of("P36")
    forms = sum(len(f.subject.expressions) for f in facts)
    manual = prompts("mp", "zeroshot", SAMPLE)
    assert {d["template_id"] for d in manual} == {t.id for t in rel.templates if t.manual}
    assert len(manual) == forms * len(rel.templates_of(manual_only=True))
    every = prompts("mp", "zeroshot", {**SAMPLE, "mp_templates": "all"})
    assert len(every) == forms * len(rel.templates)
    qa = prompts("qa", "zeroshot", SAMPLE)
    assert {d["template_id"] for d in qa} == {t.id for t in rel.templates_of("question")}
    assert all(d["prompt"].endswith("?\nA:") for d in qa)
    # every subject expression is its own prompt
    france = [d for d in manual if d["fact_id"] == "P36_001"]
    assert {d["subject_form"] for d in france} == {"France", "French Republic"}
    assert "Q: The capital of French Republic is [MASK].\nA:" in {d["prompt"].split("\n", 1)[1] for d in france}


def test_one_document_per_pair_holds_the_ids_of_its_prompt_grid():
    from belief_tasks.data import load_facts

    fs = load_facts("myriadlama", SAMPLE)
    every = parse_options(OPTIONS, {**SAMPLE, "mp_templates": "all"})
    docs = build_docs("mp", "zeroshot", every)
    assert [d["fact_id"] for d in docs] == [f.id for f in fs.facts_of("P36")]
    france = docs[0]
    assert france["templates"] == [t.id for t in fs.relations["P36"].templates]
    assert france["subjects"] == ["France", "French Republic"] and france["target"] == "Paris"
    # the grid: templates first, then subject expressions
    grid = [(p["template_id"], p["subject_form"]) for p in prompts_of(france, every)]
    assert grid[:3] == [("P36_t0", "France"), ("P36_t0", "French Republic"), ("P36_t1", "France")]
    assert len(grid) == len(france["templates"]) * 2


def test_documents_hold_demonstrations_from_their_relation_and_one_sampled_prompt_per_chosen_pair():
    meta = {**SAMPLE, "confidence_samples": 7, "confidence_prompts": 5}
    docs = prompts("mp", "4template", meta)
    sampled = [d for d in docs if d["n_samples"]]
    assert len(sampled) == 5 and len({d["fact_id"] for d in sampled}) == 5
    assert all(d["n_samples"] == 7 for d in sampled)
    for d in docs:
        demo_ids = d["demo_ids"]
        assert len(demo_ids) == 4 and d["fact_id"] not in demo_ids
        assert all(i.startswith("P36_") for i in demo_ids)
        assert d["prompt"].count("\nQ: ") == 5 and d["prompt"].count("\nA: ") == 4
    # same sampled prompts for every context of a style (comparable Ovconf)
    other = prompts("mp", "zeroshot", meta)

    def key(ds):
        return {(d["fact_id"], d["template_id"], d["subject_form"]) for d in ds if d["n_samples"]}

    assert key(other) == key(docs)
    assert not any(d["n_samples"] for d in prompts("mp", "zeroshot", {**SAMPLE, "confidence_samples": 0}))


def test_bad_options_fail_before_any_model_time():
    with pytest.raises(SchemaError, match="mp_templates"):
        parse_options(OPTIONS, {"mp_templates": "some"})
    with pytest.raises(SchemaError, match="confidence_samples"):
        parse_options(OPTIONS, {"confidence_samples": "many"})
    with pytest.raises(SchemaError, match="confidence_samples.*2.5"):
        parse_options(OPTIONS, {"confidence_samples": 2.5})  # never truncated to 2
    with pytest.raises(SchemaError, match="accuracy_draws"):
        parse_options(OPTIONS, {"accuracy_draws": 0})
    opts = parse_options(OPTIONS, {"confidence_samples": "3", "accuracy_draws": 7.0, "mp_templates": "ALL"})
    assert (opts.confidence_samples, opts.accuracy_draws, opts.mp_templates, opts.qa_templates) == (3, 7, "all", "all")
