"""MONITOR prompts and subword cuts (belief_tasks/prompts/monitor.py), and the FKTC loader on the real files."""

from __future__ import annotations

import pytest

from belief_tasks.facts.schema import Entity, Fact, Relation, SchemaError, Template
from belief_tasks.prompts import monitor as P

REL = Relation(
    "P17",
    "country",
    frames=(
        Template("P17_f0", "Which country is the location of [X]? [Y]", "question"),
        Template("P17_f1", "Which country is [X] situated in? [Y]", "question"),
    ),
)
FACT = Fact("P17_1", "P17", Entity("Cunter"), (Entity("Switzerland"),), (Entity("England"), Entity("Bolivia")))


def test_anchor_prompts_follow_table_1():
    anchors = P.anchor_prompts(FACT, REL, "{prompt}")
    assert [(a.key, a.kind, a.text) for a in anchors] == [
        ("positive", "positive", "Switzerland. Which country is the location of Cunter?"),  # template 4
        ("P17_f0", "frame", "Which country is the location of Cunter?"),  # template 2, base question
        ("P17_f1", "frame", "Which country is Cunter situated in?"),
        ("neg0", "negative", "England. Which country is the location of Cunter?"),  # template 5
        ("neg1", "negative", "Bolivia. Which country is the location of Cunter?"),
    ]
    qa = P.anchor_prompts(FACT, REL, P.answer_format(None))
    assert qa[1].text == "Question: Which country is the location of Cunter?\nAnswer:"
    assert P.answer_text(FACT) == " Switzerland"


def test_answer_format_and_missing_negatives_are_checked():
    assert P.answer_format("bare") == "{prompt}"
    assert P.answer_format("Q: {prompt} A:") == "Q: {prompt} A:"
    with pytest.raises(ValueError, match="prompt"):
        P.answer_format("Q: A:")
    with pytest.raises(ValueError, match="whitespace"):
        P.answer_format("Q: {prompt} A: ")
    with pytest.raises(SchemaError, match="negatives"):
        P.anchor_prompts(Fact("x", "P17", Entity("a"), (Entity("b"),)), REL)


def test_first_line():
    assert P.first_line(" Switzerland.\nQuestion: ...") == "Switzerland."
    assert P.first_line("") == ""


class _TableEncoder:
    """``prompts.monitor.Encoder`` over a table of strings and their tokens."""

    prefix_token_id = 0

    def __init__(self, table):
        self.table = table

    def encode(self, strings):
        return [list(self.table[s]) for s in strings]

    def tok_encode(self, string, add_special_tokens=None):
        return self.encode([string])[0]


def _table_encoder(table):
    return _TableEncoder(table)


def test_exact_cuts_keep_consistent_token_boundaries():
    # " xyz" -> [" x", "yz"]; the prefix "Q: x" re-tokenises to the same ids
    enc = _table_encoder({"Q:": [1], "Q: xyz": [1, 10, 11], "Q: ": [1, 14], "Q: x": [1, 10], "Q: xy": [1, 10, 13]})
    p = P.exact_cuts(enc, "Q:", " xyz")
    assert (p.context_ids, p.answer_ids, p.exact) == ([1], [10, 11], {2: 1})
    cuts = P.subword_units([p], " xyz")
    assert cuts == [0, 2, 4]
    assert P.unit_token_counts(p, cuts) == [1, 1]
    assert P.prefix_requests("Q:", " xyz", cuts) == [("Q:", " x"), ("Q: x", "yz")]


def test_inconsistent_prefix_merges_tokens_into_one_unit():
    # the prefix "Q: x" tokenises to another id than the whole string's first answer token
    enc = _table_encoder({"Q:": [1], "Q: xyz": [1, 10, 11], "Q: ": [1, 14], "Q: x": [1, 12], "Q: xy": [1, 10, 13]})
    p = P.exact_cuts(enc, "Q:", " xyz")
    assert p.exact == {}
    cuts = P.subword_units([p], " xyz")
    assert cuts == [0, 4] and P.unit_token_counts(p, cuts) == [2]
    assert P.prefix_requests("Q:", " xyz", cuts) == [("Q:", " xyz")]


def test_units_are_the_cuts_all_prompts_share():
    a = P.Pieces([1], [10, 11, 12], {2: 1, 4: 2})
    b = P.Pieces([2, 3], [10, 11, 12], {4: 2})
    cuts = P.subword_units([a, b], " abcdef")
    assert cuts == [0, 4, 7]
    assert P.unit_token_counts(a, cuts) == [2, 1]


def test_prefix_retokenisation_agrees_with_whole_string(model_path):
    """On the bundled model's tokenizer every subword cut of FKTC-like answers is exact."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_path))

    class Enc(_TableEncoder):
        def encode(self, strings):
            return tok(list(strings))["input_ids"]

    enc = Enc({}).encode

    prompt = P.answer_format(None).format(prompt="Which city is the capital of Switzerland?")
    for obj in [
        "Bern",
        "Zürich",
        "São Paulo",
        "Kaohsiung City",
        "Deutsche Grammophon",
        "Ōita",
        "北京",
        "U.S. Virgin Islands",
    ]:
        answer = " " + obj
        p = P.exact_cuts(Enc({}), prompt, answer)
        cuts = P.subword_units([p], answer)
        whole = enc([prompt + answer])[0]
        assert p.context_ids + p.answer_ids == whole
        # re-tokenising each growing prefix gives exactly the whole string's tokens up to that cut
        for (context, piece), n in zip(P.prefix_requests(prompt, answer, cuts), P.unit_token_counts(p, cuts)):
            ctx_ids = enc([context])[0]
            assert ctx_ids == whole[: len(ctx_ids)]
            assert enc([context + piece])[0] == whole[: len(ctx_ids) + n]
        if obj.isascii():  # byte-level BPE: every token of an ASCII answer is its own unit
            assert len(cuts) - 1 == len(p.answer_ids), obj


def test_fktc_loader_on_the_20_real_files(shared_data):
    from belief_tasks.data import load_facts
    from belief_tasks.data.fktc import RELATION_IDS

    fs = load_facts("fktc", {"fktc_path": str(shared_data / "fktc")})
    assert sorted(fs.relations) == sorted(RELATION_IDS) and len(fs.relations) == 20
    assert len(fs) == 16198
    for rid, rel in fs.relations.items():
        assert len(rel.frames) == (6 if rid in ("P264", "P276") else 7), rid
        assert all("[X]" in f.question and "[Y]" not in f.question for f in rel.frames)
    assert all(len(f.negatives) == 5 for f in fs)
    cunter = next(f for f in fs.facts_of("P17") if f.subject.label == "Cunter")  # the paper's Figure 1 fact
    anchors = P.anchor_prompts(cunter, fs.relations["P17"], "{prompt}")
    assert anchors[0].text == "Switzerland. What is the location of Cunter?"
    assert anchors[-1].text == "Cyprus. What is the location of Cunter?"
    assert len(anchors) == 1 + 7 + 5
    assert len(P.anchor_prompts(fs.facts_of("P276")[0], fs.relations["P276"])) == 1 + 6 + 5
