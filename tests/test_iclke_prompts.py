"""IC-LKE / EIC-LKE inputs: σ(x, r), seeded examples without leakage, option sets.

Real BEAR-big rows through the ``shared_data`` fixture; T-REx-MC through a small
fixture we write in the hub's column layout.
"""

from __future__ import annotations

import json

import pytest

from belief_tasks.data import load_facts
from belief_tasks.facts.schema import Entity, Fact, Relation
from belief_tasks.options import KnobError, parse_options
from belief_tasks.prompts import iclke as P
from belief_tasks.tasks import iclke as T
from belief_tasks.tasks.base import unpack

# ---------------------------------------------------------------- pure rendering


def test_sigma_space_format_is_eq1():
    fmt = P.pair_format("space")
    assert (
        fmt.render([["Feynman", "1918"], ["Heisenberg", "1901"]], "Einstein") == "Feynman 1918 Heisenberg 1901 Einstein"
    )
    assert fmt.render([], "Einstein") == "Einstein"


def test_sigma_reference_format():
    fmt = P.pair_format("colon_comma")
    assert (
        fmt.render([["Feynman", "1918"], ["Heisenberg", "1901"]], "Einstein")
        == "Feynman : 1918, Heisenberg : 1901, Einstein :"
    )
    with pytest.raises(ValueError, match="unknown IC-LKE format"):
        P.pair_format("tabs")


def test_eiclke_format_is_appendix_c2():
    """Appendix C.2: a space between subject and object, a comma between tuples; IC-LKE keeps eq. 1's spaces."""
    assert P.DEFAULT_FORMAT == {"iclke": "space", "eiclke": "space_comma"}
    fmt = P.pair_format("space_comma")
    assert (
        fmt.render([["Feynman", "1918"], ["Heisenberg", "1901"]], "Einstein")
        == "Feynman 1918, Heisenberg 1901, Einstein"
    )
    examples, prior = [["a", "1"], ["b", "2"]], [(1, "X", ["x0", "x1"])]
    doc = {
        "format": "space_comma",
        "subject": "Z",
        "examples": json.dumps(examples),
        "prior": json.dumps([list(p) for p in prior]),
    }
    assert T.eic_context(doc, 1) == "a 1, X x1, b 2, Z"


def test_eic_pairs_insert_option_k_of_earlier_test_facts():
    examples = [["a", "1"], ["b", "2"], ["c", "3"], ["d", "4"]]
    prior = [(1, "X", ["x0", "x1"]), (3, "Y", ["y0", "y1", "y2"])]
    assert P.eic_pairs(examples, prior, 2) == [["a", "1"], ["X", "x0"], ["b", "2"], ["c", "3"], ["Y", "y2"], ["d", "4"]]
    assert P.eic_pairs(examples, [], 0) == examples
    doc = {
        "format": "space",
        "subject": "Z",
        "examples": json.dumps(examples),
        "prior": json.dumps([list(p) for p in prior]),
    }
    assert T.eic_context(doc, 1) == "a 1 X x1 b 2 c 3 Y y1 d 4 Z"


def _params(**knobs) -> P.Params:
    return T.params(parse_options(T.OPTIONS, knobs))


def _fact(i, subject, obj, rel="P1"):
    return Fact(f"{rel}_{i}", rel, Entity(subject), (Entity(obj),))


def test_examples_never_contain_the_test_subject():
    train = [_fact(i, f"s{i}", f"o{i}") for i in range(20)] + [
        _fact(99, "Target", "gold"),
        _fact(98, "target", "other"),
    ]
    test = _fact(100, "Target", "gold")
    for demos in ("relation", "fact"):
        ex = P.choose_examples(test, train, _params(n_examples=50, demos=demos))
        assert len(ex) == 20 and all(f.subject.label.lower() != "target" for f in ex)
    # seeded: same seed same examples, another seed another order
    a = P.choose_examples(test, train, _params(n_examples=5, demos="fact"))
    assert a == P.choose_examples(test, train, _params(n_examples=5, demos="fact"))
    assert a != P.choose_examples(test, train, _params(n_examples=5, demos="fact", seed=7))


def test_option_set_excludes_every_accepted_answer():
    rel = Relation(
        "P1", "r", answer_space=tuple(Entity(x) for x in ["Paris", "paris", "Lutetia", "Rome", "Oslo", "Bern"])
    )
    fact = Fact("P1_1", "P1", Entity("France"), (Entity("Paris", ("Lutetia",)),))
    options, gold = P.option_set(fact, rel, seed=1, max_options=100)
    assert options[gold] == "Paris"
    assert sorted(options) == ["Bern", "Oslo", "Paris", "Rome"]
    options3, gold3 = P.option_set(fact, rel, seed=1, max_options=3)
    assert len(options3) == 3 and options3[gold3] == "Paris"


# ---------------------------------------------------------------- real BEAR-big rows


@pytest.fixture(scope="module")
def bear_md(shared_data):
    return {"bear_big_path": str(shared_data / "bear" / "BEAR-big"), "relations": "P36,P103"}


@pytest.fixture(scope="module")
def bear_docs(bear_md):
    return T.iclke_docs(load_facts("bear_big", bear_md), parse_options(T.OPTIONS, bear_md))


def test_bear_split_is_seeded_and_disjoint(bear_md):
    fs = load_facts("bear_big", bear_md)
    facts = fs.facts_of("P36")
    train, test = P.split_relation(facts, 1234, 100)
    assert (len(train), len(test)) == (97, 97)  # 194 facts: half, at most 100
    assert not {f.id for f in train} & {f.id for f in test}
    assert [f.id for f in train] == [f.id for f in P.split_relation(facts, 1234, 100)[0]]
    assert [f.id for f in train] != [f.id for f in P.split_relation(facts, 99, 100)[0]]


def test_bear_options_and_examples(bear_md, bear_docs):
    fs = load_facts("bear_big", bear_md)
    space = {rid: {e.label for e in rel.answer_space} for rid, rel in fs.relations.items()}
    by_id = {f.id: f for f in fs.facts}
    assert {d["relation"] for d in bear_docs} == {"P36", "P103"}
    for d in bear_docs:
        options = d["options"]
        # P36 has 194 distinct capitals: exactly 100 options; P103 has 65 languages: all of them
        assert len(options) == (100 if d["relation"] == "P36" else len(space["P103"]) == 65 and 65)
        assert len(set(options)) == len(options) and set(options) <= space[d["relation"]]
        assert options[d["gold_index"]] == d["gold"] and options.count(d["gold"]) == 1
        # 50 examples from the relation's training facts, none with the test subject
        assert d["n_examples"] == 50 and len(d["example_ids"]) == 50
        test_fact = by_id[d["fact_id"]]
        examples = [by_id[i] for i in d["example_ids"]]
        assert all(e.relation == d["relation"] and e.id != d["fact_id"] for e in examples)
        assert not any(P.subject_keys(e) & P.subject_keys(test_fact) for e in examples)
        assert d["context"] == P.pair_format("space").render(P.as_pairs(examples), d["subject"])
        assert f"{d['subject']} {d['gold']}" not in d["context"]


def test_bear_docs_are_seeded(bear_md, bear_docs):
    again = T.iclke_docs(load_facts("bear_big", bear_md), parse_options(T.OPTIONS, bear_md))
    assert again == bear_docs
    other = T.iclke_docs(load_facts("bear_big", bear_md), parse_options(T.OPTIONS, {**bear_md, "seed": 5}))
    assert [d["options"] for d in other] != [d["options"] for d in bear_docs]
    assert [d["context"] for d in other] != [d["context"] for d in bear_docs]


def test_bear_eic_groups(bear_md):
    fs = load_facts("bear_big", bear_md)
    docs = T.eiclke_docs(fs, parse_options(T.OPTIONS, bear_md))
    groups: dict[str, list[dict]] = {}
    for d in docs:
        groups.setdefault(d["group"], []).append(d)
    assert sum(len(g) for g in groups.values()) == len(docs) == 97 + 585 - min(100, 585 // 2)
    by_id = {f.id: f for f in fs.facts}
    for members in groups.values():
        # P36: 97 training facts -> lead 48, a test fact every 5 -> 10 slots
        assert len(members) <= 10
        subjects = set().union(*(P.subject_keys(by_id[d["fact_id"]]) for d in members))
        for d in members:
            examples, prior = unpack(d, "examples"), unpack(d, "prior")
            assert not any(x.casefold() in subjects for x, _ in examples)
            assert [p[1] for p in prior] == [m["subject"] for m in members[: d["slot"]]]
            assert [p[2] for p in prior] == [m["options"] for m in members[: d["slot"]]]
            ctx = T.eic_context(d, 3)
            assert ctx.endswith(" " + d["subject"])
            for p in prior:  # sequence 3 holds option 3 of every earlier test fact
                assert f"{p[1]} {p[2][3 % len(p[2])]}" in ctx
    first = [d for d in docs if d["relation"] == "P36" and d["slot"] == 0][0]
    assert len(unpack(first, "examples")) == 48


# ---------------------------------------------------------------- T-REx-MC in the hub layout


CAPITAL_DISTRACTORS = ["Helsinki", "Warsaw", "Prague", "Budapest", "Bern", "Sofia"]
LANGUAGE_DISTRACTORS = ["Finnish", "Polish", "Czech", "Hungarian", "Swedish", "Bulgarian"]


def write_trex_fixture(folder, n_choices: int = 6):
    """A tiny T-REx-MC copy (hub columns: integer Relation_ID, 'Multiple Choices' stringified);
    facts we wrote ourselves. Alternatives are objects that never occur as training objects."""
    capitals = [
        ("France", "Paris"),
        ("Germany", "Berlin"),
        ("Italy", "Rome"),
        ("Spain", "Madrid"),
        ("Japan", "Tokyo"),
        ("Russia", "Moscow"),
        ("Egypt", "Cairo"),
        ("Greece", "Athens"),
        ("Norway", "Oslo"),
        ("Portugal", "Lisbon"),
        ("Austria", "Vienna"),
        ("Ireland", "Dublin"),
    ]
    languages = [
        ("France", "French"),
        ("Germany", "German"),
        ("Italy", "Italian"),
        ("Spain", "Spanish"),
        ("Japan", "Japanese"),
        ("Russia", "Russian"),
        ("Greece", "Greek"),
        ("Portugal", "Portuguese"),
    ]

    def rows(pairs, rid, name, distractors):
        return [
            {
                "Relation_ID": rid,
                "Relation Name": name,
                "Subject": s,
                "Object": o,
                "Multiple Choices": repr(distractors[: n_choices - 1]),
                "Title": s,
                "Text": f"{s} ...",
            }
            for s, o in pairs
        ]

    folder.mkdir(parents=True, exist_ok=True)
    splits = {
        "train": rows(capitals[:8], 50, "capital", CAPITAL_DISTRACTORS)
        + rows(languages[:5], 70, "official language", LANGUAGE_DISTRACTORS),
        "test": rows(capitals[8:], 50, "capital", CAPITAL_DISTRACTORS)
        + rows(languages[5:], 70, "official language", LANGUAGE_DISTRACTORS),
    }
    for split, rs in splits.items():
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for r in rs:
                fh.write(json.dumps(r) + "\n")
    return folder


def test_trex_mc_fixture_task(tmp_path):
    folder = write_trex_fixture(tmp_path / "trex")
    md = {"trex_mc_path": str(folder), "format": "colon_comma"}
    ds = T.iclke_trex_mc(parse_options(T.OPTIONS, md))["test"]
    docs = ds.to_list()
    assert len(docs) == 4 + 3 and {d["relation"] for d in docs} == {"50", "70"}
    norway = next(d for d in docs if d["subject"] == "Norway")
    options = unpack(norway, "options")
    # its five 'Multiple Choices' plus the gold object
    assert sorted(options) == sorted(CAPITAL_DISTRACTORS[:5] + ["Oslo"])
    assert options[norway["gold_index"]] == "Oslo"
    # examples: all 8 training capitals (n = 50 but only 8 exist), reference-code format
    ctx = T.doc_to_text(norway)
    assert ctx.endswith(", Norway :") and ctx.count(" : ") == 8 and "Oslo" not in ctx
    assert "Egypt : Cairo" in ctx and "Ireland" not in ctx  # train facts only, no other test fact
    eic = T.eiclke_trex_mc(parse_options(T.OPTIONS, md))["test"].to_list()
    assert sorted(d["fact_id"] for d in eic) == sorted(d["fact_id"] for d in docs)


def test_knobs_from_metadata():
    opts = parse_options(
        T.OPTIONS, {"n_examples": "10", "format": "colon_comma", "demos": "fact", "seed": 3, "max_options": 20}
    )
    assert (opts.n_examples, opts.format, opts.demos, opts.seed, opts.max_options) == (10, "colon_comma", "fact", 3, 20)
    # paper defaults: n = 50, 100 options, space; EIC-LKE: 50 lead facts, a test fact every 5
    assert T.params(parse_options(T.OPTIONS, {})) == P.Params(
        seed=1234, n_examples=50, max_options=100, demos="relation", eic_lead=50, eic_every=5
    )
    defaults = parse_options(T.OPTIONS, {})
    assert (defaults.train_size, defaults.format) == (100, None)  # None: the method's own format
    assert parse_options(T.OPTIONS, {"n_examples": 0}).n_examples == 0  # zero-shot is allowed
    for bad in (
        {"format": "tsv"},
        {"demos": "random"},
        {"max_options": 0},
        {"n_examples": -1},
        {"eic_every": 0},
        {"train_size": "many"},
    ):
        with pytest.raises(KnobError, match=next(iter(bad))):
            parse_options(T.OPTIONS, bad)
    with pytest.raises(ValueError, match="unknown relations"):
        T.iclke_docs(load_facts("bear_big", {"source": "sample"}), parse_options(T.OPTIONS, {"relations": "P36,P999"}))
