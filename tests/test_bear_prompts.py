"""BEAR statement construction and docs, on real BEAR rows and against lm-pub-quiz's own templater."""

from __future__ import annotations

import json

import pytest

from belief_tasks.options import KnobError, parse_options
from belief_tasks.prompts.bear import SCORING_MODES, capitalize, option_requests, statement
from belief_tasks.tasks.bear import OPTIONS, build_docs, requests_of


@pytest.fixture(scope="module")
def bear(shared_data):
    from belief_tasks.data import load_facts

    return load_facts("bear", {"bear_path": str(shared_data / "bear" / "BEAR")})


def test_capitalize_touches_only_the_first_character():
    assert capitalize("mezzo-soprano is the voice type of Ann.") == "Mezzo-soprano is the voice type of Ann."
    assert capitalize("iPhone by Apple") == "IPhone by Apple"
    assert capitalize("") == ""


def test_slots_are_filled_in_one_pass():
    # A subject that contains "[Y]" is not expanded again (lm-pub-quiz replaces both slots in one pass).
    assert statement("[X] is in [Y].", "Box [Y]", "Paris") == "Box [Y] is in Paris."


def test_real_bear_statements(bear):
    p36 = bear.relations["P36"]
    fact = bear.facts_of("P36")[0]  # West Bengal -> Kolkata
    texts = [statement(t.text, fact.subject.label, fact.object.label) for t in p36.templates]
    assert texts == [
        "The capital of West Bengal is Kolkata.",
        "West Bengal has its governmental seat in Kolkata.",
        "Kolkata serves as the capital of West Bengal.",
    ]


def test_identical_to_lm_pub_quiz_templater_on_every_relation(bear):
    from lm_pub_quiz.evaluators.templating_util import Templater

    ref = Templater()
    checked = 0
    for rid, rel in bear.relations.items():
        fact = bear.facts_of(rid)[0]
        options = [e.label for e in rel.answer_space]
        for t in rel.templates:
            ours = option_requests(t.text, fact.subject.label, options).texts
            theirs = tuple(
                ref.replace_placeholders(template=t.text, subject=fact.subject.label, answer=a)[0] for a in options
            )
            assert ours == theirs, (rid, t.text)
            checked += len(options)
    assert checked == sum(len(r.templates) * len(r.answer_space) for r in bear.relations.values()) > 5000


@pytest.mark.parametrize("scoring", SCORING_MODES)
def test_every_scoring_mode_rebuilds_the_same_statements(bear, scoring):
    for rid in ("P36", "P412", "P105"):
        rel, fact = bear.relations[rid], bear.facts_of(rid)[0]
        options = [e.label for e in rel.answer_space]
        for t in rel.templates:
            req = option_requests(t.text, fact.subject.label, options, scoring)
            full = option_requests(t.text, fact.subject.label, options, "statement").texts
            if scoring == "answer":  # the text after the answer is dropped, nothing else
                suffix = t.text.split("[Y]", 1)[1].replace("[X]", fact.subject.label)
                assert tuple(x + suffix for x in req.texts) == full
            else:
                assert req.texts == full
            assert not req.context.endswith(" ")  # the space travels with the answer, as lm-eval splits it


def test_answer_mode_splits_before_the_answer(bear):
    rel, fact = bear.relations["P36"], bear.facts_of("P36")[0]
    req = option_requests(rel.templates[0].text, fact.subject.label, ["Kolkata", "Rabat"], "answer")
    assert req == type(req)("The capital of West Bengal is", (" Kolkata", " Rabat"))
    req = option_requests(rel.templates[2].text, fact.subject.label, ["Kolkata"], "answer_to_end")
    assert req.context == "" and req.continuations == ("Kolkata serves as the capital of West Bengal.",)
    # an answer that opens the sentence is capitalised, as in the full statement
    req = option_requests("[Y] is the voice type of [X].", "Ann", ["mezzo-soprano"], "answer")
    assert req.continuations == ("Mezzo-soprano",)


def test_docs_on_real_bear(bear, shared_data):
    docs = build_docs(bear, parse_options(OPTIONS, {"relations": "P36,P105", "max_facts_per_relation": 4}))
    assert len(docs) == 2 * 4 * 3  # facts x templates
    info = json.loads((shared_data / "bear" / "relation_info.json").read_text())
    rows = {}
    for rid in ("P36", "P105"):
        for n, line in enumerate((shared_data / "bear" / "BEAR" / f"{rid}.jsonl").read_text().splitlines(), 1):
            rows[f"{rid}_{n}"] = json.loads(line)
    for d in docs:
        row = rows[d["fact_id"]]
        assert d["gold"] == [row["answer_idx"]]  # the answer index lm-pub-quiz reads
        assert d["options"][row["answer_idx"]] == row["obj_label"]
        req = requests_of(d)
        assert req.context == "" and len(req.continuations) == len(d["options"])
        assert req.continuations[row["answer_idx"]] == statement(
            bear.relations[d["relation"]].templates[d["template_index"]].text, row["sub_label"], row["obj_label"]
        )
        assert d["domains"] == info[d["relation"]]["domains"]
        assert d["cardinality"] == {"P36": "1:1", "P105": "1:N"}[d["relation"]]
    # template selection
    assert {
        d["template_index"] for d in build_docs(bear, parse_options(OPTIONS, {"relations": "P36", "templates": "0,2"}))
    } == {0, 2}


def test_bear_counts(bear, shared_data):
    from belief_tasks.data import load_facts

    assert len(bear) == 7731 and len(bear.relations) == 60
    big = load_facts("bear_big", {"bear_big_path": str(shared_data / "bear" / "BEAR-big")})
    assert (
        len(big) == 40915 and len(big.relations) == 78 and len(big.skipped) == 2
    )  # P291 row 41, P414 without its file


def test_sample_uses_statement_templates_and_accepts_every_object():
    from belief_tasks.data import load_facts

    fs = load_facts("bear", {"source": "sample"})
    docs = build_docs(fs, parse_options(OPTIONS, {"source": "sample", "max_facts_per_relation": 2}))
    for d in docs:
        rel = fs.relations[d["relation"]]
        assert d["template_id"] in {t.id for t in rel.templates_of("statement")}
        assert "?" not in requests_of(d).continuations[0]
        fact = next(f for f in fs.facts_of(d["relation"]) if f.id == d["fact_id"])
        assert sorted(d["options"][g] for g in d["gold"]) == sorted(
            o.label for o in fact.objects if o.label in d["options"]
        )


def test_knobs_parse_and_bad_settings_fail_before_model_time():
    opts = parse_options(OPTIONS, {"reduction": "Mean", "scoring": "answer", "templates": "0|2"})
    assert (opts.reduction, opts.scoring, opts.templates) == ("mean", "answer", (0, 2))
    defaults = parse_options(OPTIONS, {"templates": "all"})
    assert (defaults.reduction, defaults.scoring, defaults.templates) == ("sum", "statement", None)
    assert parse_options(OPTIONS, {"templates": 1}).templates == (1,)
    with pytest.raises(KnobError, match="reduction"):
        parse_options(OPTIONS, {"reduction": "max"})
    with pytest.raises(KnobError, match="scoring"):
        parse_options(OPTIONS, {"scoring": "subject"})
    with pytest.raises(KnobError, match="templates"):
        parse_options(OPTIONS, {"templates": "0,x"})
    from belief_tasks.data import load_facts

    fs = load_facts("bear", {"source": "sample"})
    with pytest.raises(KnobError, match="templates"):  # BEAR has three templates per relation
        build_docs(fs, parse_options(OPTIONS, {"source": "sample", "templates": "7", "max_facts_per_relation": 1}))
    with pytest.raises(KnobError, match="pretrained"):
        build_docs(fs, parse_options(OPTIONS, {"source": "sample", "reduction": "mean", "max_facts_per_relation": 1}))
