"""Answer matching: the one implementation every metric uses.

BELIEF (v3 section 3; v1 appendix A.3) matches a generated answer against the
gold objects after tokenising and lemmatising both: "a guitar" -> [a, guitar],
"Guitars" -> [guitar]. Two strings match when one normalised token list is
contained (as a contiguous run) in the other.

* accuracy is one-directional: the output contains an accepted object expression
  (``contains_answer``);
* consistency and sampled confidence compare two model outputs, bidirectionally
  (``outputs_agree``).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Iterable, Sequence

from lemminflect import getAllLemmas

# Words: runs of letters/digits (any script), keeping inner apostrophes and hyphens
# out, so "U.S." -> [u, s] and "Jean-Paul" -> [jean, paul].
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)


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


def _contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    n = len(needle)
    if n == 0:
        return False  # an empty answer matches nothing
    return any(tuple(haystack[i : i + n]) == tuple(needle) for i in range(len(haystack) - n + 1))


def contains_answer(output: str, accepted: Iterable[str]) -> bool:
    """One-directional match for accuracy: ``output`` contains one of ``accepted``."""
    out = normalize(output)
    return any(_contains(out, normalize(a)) for a in accepted)


def outputs_agree(a: str, b: str) -> bool:
    """Bidirectional match for consistency and confidence: either contains the other."""
    na, nb = normalize(a), normalize(b)
    return _contains(na, nb) or _contains(nb, na)


def word_count(text: str) -> int:
    """Number of word tokens (before lemmatising), for the 1-word ratio."""
    return len(_TOKEN.findall(unicodedata.normalize("NFKC", text or "")))
