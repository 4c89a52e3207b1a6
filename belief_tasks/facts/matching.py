"""Answer matching: the one implementation every metric uses.

BELIEF (v3 section 3.2; v1 section 5.1, "Evaluation setup") matches a generated
answer against the gold objects after tokenising and lemmatising both: "a guitar"
-> [a, guitar], "Guitars" -> [guitar]. Two strings match when one normalised token
list is contained (as a contiguous run) in the other. The full normalisation and
our additions to the paper are listed in docs/belief.md ("Answer normalisation").

* accuracy is one-directional: the output contains an accepted object expression
  (``contains_answer``);
* consistency and sampled confidence compare two model outputs, bidirectionally
  (``outputs_agree``).

Acronyms (our addition, not in the paper): case folding would let the alias "US"
match the pronoun in "Tell us", or the currency code "TRY" match "try". An
expression that is all capitals, 2-5 letters or digits ("US", "UK", "USA", "NYC",
"EUR", "3M") therefore matches only the same capitals as a whole token of the
other string ("The US" yes, "tell us" no).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Iterable, Sequence

from lemminflect import getAllLemmas

# Matching tokens: runs of letters/digits (any script); punctuation separates them,
# so "U.S." -> [u, s] and "Jean-Paul" -> [jean, paul] on both sides of a match.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_LETTER_OR_DIGIT = re.compile(r"[^\W_]", re.UNICODE)
_ACRONYM_MAX = 5


@lru_cache(maxsize=65536)
def _lemma(word: str) -> str:
    # Prefer the noun lemma (answers are entities), then any other part of speech.
    lemmas = getAllLemmas(word)
    for pos in ("NOUN", "PROPN", "VERB", "ADJ", "ADV"):
        if pos in lemmas:
            return lemmas[pos][0].lower()
    return word


@lru_cache(maxsize=65536)
def normalize(text: str) -> tuple[str, ...]:
    """Lower-cased, accent-folded, lemmatised word tokens of ``text``."""
    text = unicodedata.normalize("NFKC", text or "").casefold()
    # Fold accents so "Zürich" and "Zurich" agree; keep letters of other scripts.
    folded = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return tuple(_lemma(w) for w in _TOKEN.findall(folded))


@lru_cache(maxsize=65536)
def acronym(text: str) -> str | None:
    """``text`` (NFKC, stripped) when it is an all-capitals token of 2-5 letters/digits, else None."""
    t = unicodedata.normalize("NFKC", text or "").strip()
    return t if 2 <= len(t) <= _ACRONYM_MAX and t.isalnum() and t.isupper() else None


@lru_cache(maxsize=65536)
def _cased_tokens(text: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(unicodedata.normalize("NFKC", text or "")))


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0:
        return False  # an empty answer matches nothing
    return any(tuple(haystack[i : i + n]) == tuple(needle) for i in range(len(haystack) - n + 1))


def _includes(text: str, expression: str) -> bool:
    """``text`` contains ``expression``: acronyms case-sensitively as a token, else normalised runs."""
    acr = acronym(expression)
    if acr is not None:
        return acr in _cased_tokens(text)
    return _contains(normalize(text), normalize(expression))


def contains_answer(output: str, accepted: Iterable[str]) -> bool:
    """One-directional match for accuracy: ``output`` contains one of ``accepted``."""
    return any(_includes(output, a) for a in accepted)


#: what MONITOR's reference ``eval.py`` (Vicky-Wil/MONITOR at 654674a, line 54) deletes from an answer, in this order
MONITOR_EVAL_PY_REMOVED = (".</s>", ".\n", ".", ";", "!", ",", "?", "\n", "</s>", "<pad>")


def eval_py_exact(output: str, target: str) -> bool:
    """MONITOR's reference test ``M == ans`` (``eval.py`` lines 88-96, 173, 224): the answer, stripped, with every
    occurrence of each string of ``MONITOR_EVAL_PY_REMOVED`` deleted (and not stripped again), equals the object label
    stripped, case and all; no aliases. The object keeps its own punctuation, so an object holding one of those
    strings ("Washington, D.C.") never matches, as in ``eval.py``."""
    answer = (output or "").strip()
    for removed in MONITOR_EVAL_PY_REMOVED:
        answer = answer.replace(removed, "")
    return answer == target.strip()


def outputs_agree(a: str, b: str) -> bool:
    """Bidirectional match for consistency and confidence: either contains the other.

    An acronym answer ("US") agrees only with an answer holding the same capitals, not with
    "us", which would otherwise contain it after case folding."""
    if acronym(b):
        return _includes(a, b)
    if acronym(a):
        return _includes(b, a)
    return _includes(a, b) or _includes(b, a)


def words(text: str) -> list[str]:
    """The answer's words for the 1-word ratio: whitespace-separated tokens holding a letter or digit.

    "U.S.", "Jean-Paul", "O'Brien", "Coca-Cola", "1984" and "Paris." are one word each;
    a lone "-" or "?!" is none. The papers do not define a word (v3 section 5.3, Table 4;
    appendix D.2, Table 15); this is our choice, see docs/belief.md.
    """
    return [w for w in unicodedata.normalize("NFKC", text or "").split() if _LETTER_OR_DIGIT.search(w)]


def word_count(text: str) -> int:
    """Number of ``words``: 1 for a one-word answer, 0 for an empty one."""
    return len(words(text))
