"""The bundled sample's gold expressions accept no wrong answer (belief_tasks/sample_data).

Accuracy is one-directional (v3 section 3.2): an output is right when it contains an
accepted object expression. So if a WRONG answer written out in full -- another entry of
the relation's answer space, or one of the fact's negatives -- contains a gold expression
("Canadian dollar" contains the alias "dollar"), a model naming the wrong entity is scored
right. Every (fact, wrong string, gold expression) triple of the sample is checked.
"""

from __future__ import annotations

import pytest

from belief_tasks.data.bundled import load_sample
from belief_tasks.facts.matching import contains_answer

SAMPLE = load_sample()


def wrong_strings(fact, relation) -> list[str]:
    """Labels and aliases of the fact's negatives and of every answer-space entry that is not one of its objects."""
    gold = {o.label for o in fact.objects}
    entities = [*fact.negatives, *(e for e in relation.answer_space if e.label not in gold)]
    return list(dict.fromkeys(x for e in entities for x in e.expressions))


def leaks(fact) -> list[tuple[str, str]]:
    relation = SAMPLE.relations[fact.relation]
    return [(w, g) for w in wrong_strings(fact, relation) for g in fact.object_expressions if contains_answer(w, [g])]


@pytest.mark.parametrize("rid", sorted(SAMPLE.relations))
def test_no_wrong_answer_contains_a_gold_expression(rid):
    found = {f.id: leaks(f) for f in SAMPLE.facts_of(rid)}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_check_catches_a_generic_alias():
    # the defect this file guards against, on a hand-made relation-sized case
    from belief_tasks.facts.schema import Entity, Fact

    usd = Entity("United States dollar", ("US dollar", "dollar"))
    fact = Fact("X_1", "P38", Entity("Ecuador"), (usd,), negatives=(Entity("Canadian dollar"),))
    relation = SAMPLE.relations["P38"]
    assert ("Canadian dollar", "dollar") in [
        (w, g) for w in wrong_strings(fact, relation) for g in fact.object_expressions if contains_answer(w, [g])
    ]


def test_the_us_alias_is_the_country_not_the_pronoun():
    usa = next(f for f in SAMPLE.facts_of("P495") if f.object.label == "United States")
    assert "US" in usa.object_expressions and "America" not in usa.object_expressions
    assert contains_answer("The US", usa.object_expressions)
    assert not contains_answer("Tell us", usa.object_expressions)
    assert not contains_answer("South America", usa.object_expressions)


@pytest.mark.parametrize(
    "company, founders",
    [
        ("Harley-Davidson", {"William S. Harley", "Arthur Davidson", "Walter Davidson", "William A. Davidson"}),
        ("Siemens", {"Werner von Siemens", "Johann Georg Halske"}),
        ("LinkedIn", {"Reid Hoffman", "Allen Blue", "Konstantin Guericke", "Eric Ly", "Jean-Luc Vaillant"}),
        ("Virgin Group", {"Richard Branson", "Nik Powell"}),
        ("Walmart", {"Sam Walton", "Bud Walton"}),
        ("Honda", {"Soichiro Honda", "Takeo Fujisawa"}),
    ],
)
def test_co_founders_are_correct_answers(company, founders):
    fact = next(f for f in SAMPLE.facts_of("P112") if f.subject.label == company)
    assert {o.label for o in fact.objects} == founders


def test_partial_founder_lists_hold_the_best_known_co_founders():
    # Alibaba had 18 founders and Standard Oil several partners: we list those we are sure of
    objects = {f.subject.label: {o.label for o in f.objects} for f in SAMPLE.facts_of("P112")}
    assert {"Jack Ma", "Joe Tsai", "Lucy Peng", "Eddie Wu"} == objects["Alibaba Group"]
    assert {"John D. Rockefeller", "William Rockefeller", "Henry Flagler", "Samuel Andrews"} == objects["Standard Oil"]


def test_every_relation_file_is_a_row_of_the_readme_with_facts_and_answer_space():
    """Adding a relation is data: a P*.json file and its README row (docs/architecture.md), no count to update."""
    from harness import ROOT
    from layout_checks import sample_relations

    assert sample_relations(ROOT) == []
    assert set(SAMPLE.relations) == {p.stem for p in (ROOT / "belief_tasks" / "sample_data").glob("P*.json")}
