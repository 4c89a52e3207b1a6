"""Answer matching and word counting (belief_tasks/facts/matching.py) against hand-worked cases."""

from __future__ import annotations

import pytest

from belief_tasks.facts.matching import acronym, contains_answer, normalize, outputs_agree, word_count, words

# ---------------------------------------------------------------- normalisation (v3 section 3.2)


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("a guitar", ("a", "guitar")),  # the paper's own example
        ("Guitars", ("guitar",)),
        ("Zürich", ("zurich",)),  # accent folding
        ("ZURICH", ("zurich",)),  # case folding
        ("ﬁddle", ("fiddle",)),  # NFKC: the ligature becomes "fi"
        ("Straße", ("strasse",)),  # full case folding, not lower()
        ("U.S.", ("u", "s")),  # punctuation separates matching tokens
        ("Jean-Paul Sartre", ("jean", "paul", "sartre")),
        ("?!", ()),
    ],
)
def test_normalize(text, tokens):
    assert normalize(text) == tokens


def test_accuracy_is_contiguous_one_directional_containment():
    assert contains_answer("the city of Paris", ["Paris"])
    assert contains_answer("guitars", ["a guitar"]) is False  # [guitar] lacks the run [a, guitar]
    assert contains_answer("a guitar", ["guitar"])
    assert not contains_answer("Paris", ["the city of Paris"])  # one-directional
    assert not contains_answer("York New", ["New York"])  # a run, in order
    assert not contains_answer("New big York", ["New York"])  # contiguous
    assert contains_answer("Zurich", ["Zürich"]) and contains_answer("ZÜRICH.", ["zurich"])


def test_outputs_agree_is_bidirectional():
    assert outputs_agree("Paris", "the city of Paris") and outputs_agree("the city of Paris", "Paris")
    assert not outputs_agree("Paris", "Lyon")
    assert not outputs_agree("", "") and not outputs_agree("...", "Paris")


# ---------------------------------------------------------------- acronyms match case-sensitively


@pytest.mark.parametrize(
    "text, expected",
    [
        ("US", "US"),
        ("UK", "UK"),
        ("USA", "USA"),
        ("NYC", "NYC"),
        (" EUR ", "EUR"),
        ("3M", "3M"),
        ("U", None),  # one letter
        ("NASDAQ", None),  # six letters: an ordinary word-like name
        ("U.S.", None),
        ("US dollar", None),
        ("Us", None),
        ("us", None),
        ("42", None),
    ],
)
def test_acronym(text, expected):
    assert acronym(text) == expected


@pytest.mark.parametrize(
    "output, accepted, hit",
    [
        ("The US", ["US"], True),
        ("US.", ["US"], True),
        ("US-based", ["US"], True),
        ("Tell us", ["US"], False),  # the pronoun is not the country
        ("Us", ["US"], False),
        ("usa", ["USA"], False),
        ("USD", ["US"], False),  # a whole token, not a prefix
        ("try", ["TRY"], False),  # Turkish lira's code vs the verb
        ("mad", ["MAD"], False),
        ("Turkish lira (TRY)", ["TRY"], True),
        ("United States", ["United States"], True),
        ("united states", ["United States"], True),  # non-acronyms still fold case
        ("U.S.", ["U.S."], True),
        ("us", ["U.S."], False),  # [us] is not the run [u, s]
    ],
)
def test_acronym_aliases_match_only_the_same_capitals(output, accepted, hit):
    assert contains_answer(output, accepted) is hit


def test_outputs_agree_applies_the_acronym_rule_both_ways():
    assert outputs_agree("US", "the US") and outputs_agree("the US", "US")
    assert not outputs_agree("US", "tell us") and not outputs_agree("tell us", "US")
    assert not outputs_agree("US", "us") and not outputs_agree("us", "US")
    assert outputs_agree("UK", "UK") and not outputs_agree("US", "USA")  # two acronyms: the same capitals


# ---------------------------------------------------------------- words: 1-word ratio and empty answers


@pytest.mark.parametrize(
    "text, count",
    [
        ("Paris", 1),
        ("Paris.", 1),
        (" Paris ", 1),
        ("U.S.", 1),
        ("Jean-Paul", 1),
        ("O'Brien", 1),
        ("Coca-Cola", 1),
        ("Zürich", 1),
        ("1984", 1),
        ("42", 1),  # numbers answer dates and counts
        ("New York", 2),
        ("Paris - France", 2),  # a lone dash is not a word
        ("", 0),
        ("   ", 0),
        ("\n", 0),
        (".", 0),
        ("?!", 0),
        ("—", 0),
        ('""', 0),
        ("- -", 0),
    ],
)
def test_word_count(text, count):
    assert word_count(text) == count


def test_words_keep_their_punctuation():
    assert words(" Jean-Paul Sartre. ") == ["Jean-Paul", "Sartre."]


@pytest.mark.parametrize("text", ["", " ", ".", "?!", "—", "A: .", "Paris", "1984", "Jean-Paul", "a.b", "_", "é"])
def test_no_word_exactly_when_nothing_to_match(text):
    # empty_answer_rate and matching agree: an answer has no word iff its normalised tokens are empty
    assert (word_count(text) == 0) == (normalize(text) == ())
