"""BELIEF-ICL prompts: instruction, demonstrations and target (v3 section 3.1, appendices D, E; v1 A.4).

Two styles, four contexts, exactly as the papers' appendix examples::

    Predict the [MASK] in each sentence in one word.      <- MP instruction
    Q: [MASK] is the administrative center of Jiangsu.   <- demonstration
    A: Nanjing.                                          <- its answer ends with a period
    Q: [MASK] consists of LAUPT.                         <- target prompt
    A:

* MP (mask prediction): any template, question-style ones included, with ``[Y]``
  replaced by ``[MASK]`` ("What is the capital of France? [MASK].").
* QA: question-style templates without the answer slot ("What is the capital of
  France?"), after the instruction "Answer each question in one word.".
* Contexts: ``zeroshot`` (no demonstrations), ``4random`` (facts from any relation,
  each with a random template), ``4relation`` (facts of the target's relation, each
  with a random template), ``4template`` (facts of the target's relation with the
  target's template). The probed subject-relation pair is never a demonstration.

Demonstrations are drawn with ``belief_tasks.facts.seeding`` from (seed, style, context,
fact id, template id): every subject expression of a pair under one template gets
the same demonstrations, and the same run always builds the same prompts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from belief_tasks.facts import seeding
from belief_tasks.facts.schema import Fact, Relation, Template
from belief_tasks.requests import MASK

INSTRUCTIONS = {"mp": "Predict the [MASK] in each sentence in one word.", "qa": "Answer each question in one word."}
STYLES = tuple(INSTRUCTIONS)
#: context name -> (number of demonstrations, where they come from)
CONTEXTS = {"zeroshot": (0, None), "4random": (4, "random"), "4relation": (4, "relation"), "4template": (4, "template")}


def query(template: Template, subject: str, style: str) -> str:
    """The text after ``Q:`` for one template and subject expression."""
    if style == "mp":
        return template.fill(subject, MASK)
    if style == "qa":
        return template.question.replace("[X]", subject)
    raise ValueError(f"unknown style {style!r}; expected one of {STYLES}")


def answer_text(obj: str) -> str:
    """A demonstration's answer: the object followed by one period ("Nanjing.")."""
    obj = obj.strip()
    return obj if obj.endswith(".") else obj + "."


@dataclass(frozen=True)
class Demonstration:
    fact_id: str
    template_id: str
    question: str  # the text after "Q:"
    answer: str  # the object label, without the period


def render(style: str, demonstrations: Sequence[Demonstration], target: str) -> str:
    """The whole prompt: instruction, ``Q:``/``A:`` demonstrations, target ``Q:`` and an open ``A:``."""
    lines = [INSTRUCTIONS[style]]
    for d in demonstrations:
        lines += [f"Q: {d.question}", f"A: {answer_text(d.answer)}"]
    lines += [f"Q: {target}", "A:"]
    return "\n".join(lines)


def chat_turns(style: str, demonstrations: Sequence[Demonstration], target: str) -> list[dict[str, str]]:
    """The same prompt as chat turns, for ``--apply_chat_template --fewshot_as_multiturn``: each
    demonstration's ``Q:`` line a user turn and its ``A:`` line the assistant's reply, the target ``Q:``
    the last user turn; the instruction opens the first user turn. Answers are extracted as from ``render``."""
    questions = [f"Q: {d.question}" for d in demonstrations] + [f"Q: {target}"]
    questions[0] = f"{INSTRUCTIONS[style]}\n{questions[0]}"
    turns: list[dict[str, str]] = []
    for q, d in zip(questions, demonstrations):
        turns += [{"role": "user", "content": q}, {"role": "assistant", "content": f"A: {answer_text(d.answer)}"}]
    return turns + [{"role": "user", "content": questions[-1]}]


def templates_for(relation: Relation, style: str, manual_only: bool) -> tuple[Template, ...]:
    """MP: the relation's templates (manual ones by default); QA: its question templates."""
    if style == "qa":
        return relation.templates_of("question", manual_only=manual_only)
    return relation.templates_of(None, manual_only=manual_only)


def _pick(pool: Sequence[Fact], k: int, exclude: str, seed: int, *keys) -> list[Fact]:
    """``k`` distinct facts of ``pool`` other than ``exclude``, seeded (drawn order kept)."""
    # random.sample over a range is O(k): no copy of a 30,000-fact pool per prompt
    drawn = seeding.rng(seed, *keys).sample(range(len(pool)), min(k + 1, len(pool)))
    return [pool[i] for i in drawn if pool[i].id != exclude][:k]


def demonstrations(
    context: str,
    style: str,
    fact: Fact,
    template: Template,
    *,
    facts_by_relation: Mapping[str, Sequence[Fact]],
    all_facts: Sequence[Fact],
    templates: Mapping[str, Sequence[Template]],
    seed: int,
    shots: int | None = None,
) -> list[Demonstration]:
    """The demonstrations for ``fact`` probed with ``template``.

    ``templates`` maps each relation to the templates this task uses (see
    ``templates_for``); ``all_facts`` is the pool for ``4random`` (facts whose
    relation has no template of this style must already be left out).
    """
    k, source = CONTEXTS[context]
    k = k if shots is None else shots
    if source is None or k == 0:
        return []
    keys = ("belief_icl", style, context, fact.id, template.id)
    if source == "random":
        chosen = _pick(all_facts, k, fact.id, seed, *keys)
    else:
        chosen = _pick(facts_by_relation[fact.relation], k, fact.id, seed, *keys)
    out = []
    for i, demo in enumerate(chosen):
        if source == "template":
            t = template
        else:
            t = seeding.choice(templates[demo.relation], seed, *keys, "template", i)
        out.append(Demonstration(demo.id, t.id, query(t, demo.subject.label, style), demo.object.label))
    return out
