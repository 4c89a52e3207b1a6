"""Masked prompts for BELIEF on encoders (BELIEF v3 section 2, v1 section 3).

A prompt is a statement template with ``[X]`` filled by a subject expression and
``[Y]`` replaced by the mask marker ``[MASK]`` ("France is the capital of [MASK]."
style). The backend swaps the marker for its tokenizer's own mask token, so the
same prompt text serves BERT (``[MASK]``) and RoBERTa (``<mask>``).

Content-free prompts (v3 section 5.4, after Zhao et al. 2021) fill ``[X]`` with
"N/A", "" or "?" instead of a subject; they measure the template's own bias.

Pure: no model, no tokenizer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from belief_tasks.facts.schema import Fact, Relation, Template
from belief_tasks.requests import MASK

#: Content-free subjects (v3 footnote 12) and the ids their records carry.
CONTENT_FREE_SUBJECTS: dict[str, str] = {"na": "N/A", "empty": "", "qmark": "?"}

_SPACES = re.compile(r"\s+")


def masked_prompt(template: Template, subject: str) -> str:
    """``template`` with ``[X]`` = ``subject`` and ``[Y]`` = ``[MASK]``, whitespace runs collapsed.

    Collapsing matters for the empty content-free subject ("The capital of  is ...").
    """
    text = _SPACES.sub(" ", template.fill(subject, MASK)).strip()
    if text.count(MASK) != 1:
        raise ValueError(f"template {template.id} gives {text.count(MASK)} mask markers in {text!r}; expected 1")
    return text


#: which templates encoder prompts use: every one (the default), or statements only
TEMPLATE_SETS = ("all", "statement")


def mp_templates(relation: Relation, which: str = "all") -> tuple[Template, ...]:
    """The MP (mask-prediction) templates of a relation.

    ``all``: every template, statements and question-style ones with the mask after the question
    ("What is the capital of France? [MASK]."): v1 evaluates its BERTs on all of MyriadLAMA's prompts,
    a fifth of which are question-style (v1 section 3, footnote 8). ``statement``: statements only.
    """
    if which not in TEMPLATE_SETS:
        raise ValueError(f"unknown template set {which!r}; known: {TEMPLATE_SETS}")
    return relation.templates_of("statement" if which == "statement" else None)


@dataclass(frozen=True)
class MaskedPrompt:
    relation: str
    fact_id: str | None  # None for content-free prompts
    template_id: str
    subject_form: str  # "label", "alias1", ... or a content-free id ("na", "empty", "qmark")
    subject: str
    text: str


def subject_forms(fact: Fact) -> list[tuple[str, str]]:
    """``[(form_id, expression)]``: the label, then each alias."""
    return [("label" if i == 0 else f"alias{i}", e) for i, e in enumerate(fact.subject.expressions)]


def fact_prompts(fact: Fact, relation: Relation, which: str = "all") -> Iterator[MaskedPrompt]:
    """Every (template, subject expression) prompt of one fact: the multi-prompt set P_t."""
    for template in mp_templates(relation, which):
        for form, subject in subject_forms(fact):
            yield MaskedPrompt(relation.id, fact.id, template.id, form, subject, masked_prompt(template, subject))


def content_free_prompts(relation: Relation, which: str = "all") -> Iterator[MaskedPrompt]:
    """One prompt per (template, content-free subject) of ``relation``."""
    for template in mp_templates(relation, which):
        for form, subject in CONTENT_FREE_SUBJECTS.items():
            yield MaskedPrompt(relation.id, None, template.id, form, subject, masked_prompt(template, subject))
