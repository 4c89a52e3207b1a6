"""BEAR statements (Wiland et al., 2024, section 3.1): one per answer option.

For a fact and a template, ``[X]`` takes the subject and ``[Y]`` each option of the
relation's answer space; the first character is capitalised. This follows
lm-pub-quiz 0.3.3 (``evaluators/templating_util.Templater``) exactly: both slots are
replaced in one left-to-right pass (a label containing "[Y]" is not re-expanded)
and only the whole statement's first character is upper-cased.

Each statement becomes one loglikelihood request ``(context, continuation)``. How it
is split decides what is scored (``SCORING_MODES``):

* ``statement`` (default, eq. 1): ``("", statement)``: the whole sentence is scored.
  On lm-eval's ``hf`` backend an empty context means "condition on the BOS token
  (or EOS when the tokenizer has none)", which is what lm-pub-quiz does for causal
  LMs; on ``hf-mlm`` it is the PLL of the whole sentence. Every option shares the
  words before the answer, which a prefix-sharing backend (``hf-shared``) reuses.
* ``answer``: ``(text before [Y], answer)``: only the answer's tokens, conditioned on
  the words before it (the paper's "conditional score" ablation, section 5.1.1).
* ``answer_to_end``: ``(text before [Y], answer + rest of the sentence)``: what
  lm-pub-quiz's ``conditional_score=True`` scores for a causal LM (its scoring mask
  starts at the first answer token and runs to the end).

Whitespace between the context and the answer goes into the continuation, as
lm-eval's ``_encode_pair`` would do, so every backend sees the same split.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from belief_tasks.facts.schema import OBJECT_SLOT, SUBJECT_SLOT

SCORING_MODES = ("statement", "answer", "answer_to_end")
_SLOTS = re.compile("(" + re.escape(SUBJECT_SLOT) + "|" + re.escape(OBJECT_SLOT) + ")")


def capitalize(text: str) -> str:
    """Upper-case the first character only (lm-pub-quiz's ``capitalize_text``; ``str.capitalize`` would lower the
    rest)."""
    return text[:1].upper() + text[1:]


def _replace(template: str, subject: str, answer: str | None) -> str:
    """One pass over the slots, like lm-pub-quiz; ``answer=None`` leaves ``[Y]`` in place."""
    values = {SUBJECT_SLOT: subject, OBJECT_SLOT: answer}

    def fill(m: re.Match[str]) -> str:
        found = values[m.group()]
        return m.group() if found is None else found

    return _SLOTS.sub(fill, template)


def statement(template: str, subject: str, answer: str) -> str:
    """The capitalised statement for one option."""
    return capitalize(_replace(template, subject, answer))


@dataclass(frozen=True)
class OptionRequests:
    """The loglikelihood requests of one (fact, template): a shared context and one continuation per option."""

    context: str
    continuations: tuple[str, ...]

    @property
    def texts(self) -> tuple[str, ...]:
        """The full statements these requests score (context + continuation)."""
        return tuple(self.context + c for c in self.continuations)


def option_requests(template: str, subject: str, options: Sequence[str], scoring: str = "statement") -> OptionRequests:
    """Context and continuations for every option of ``options`` (see the module docstring)."""
    if scoring not in SCORING_MODES:
        raise ValueError(f"scoring must be one of {SCORING_MODES}, got {scoring!r}")
    if scoring == "statement":
        return OptionRequests("", tuple(statement(template, subject, a) for a in options))
    filled = _replace(template, subject, None)
    before, sep, after = filled.partition(OBJECT_SLOT)
    if not sep:
        raise ValueError(f"template {template!r} has no {OBJECT_SLOT} slot")
    context = before.rstrip()
    space = before[len(context) :]
    if not context:  # the answer opens the sentence: it takes the capital letter
        conts = [capitalize(space + a) for a in options]
    else:
        context = capitalize(context)
        conts = [space + a for a in options]
    if scoring == "answer_to_end":
        conts = [c + after for c in conts]
    return OptionRequests(context, tuple(conts))
