"""MONITOR prompts (Wang et al., 2024, Table 1) and the object's subword pieces.

For one fact, with the relation's frames (FKTC QA prompts, the first being the
base question ``r``):

* positive context (template 4): ``"{object}. " + base question``  -> primary anchor
* each frame r_j without context (template 2)                      -> foreign anchors (PFD)
* each negative context (template 5): ``"{negative}. " + base question`` -> foreign anchors (IRD)

and, for the paper's average accuracy (section 4.3: "R · M combinations"), every frame behind every
negative context, ``"{negative}. " + r_j`` (template 5 applied to every expanded frame, section 5.1):
``interference_prompts``, R x M greedy answers per fact.

Each text is wrapped in an answer format (``ANSWER_FORMATS``; default
``"Question: {prompt}\\nAnswer:"``) and the answer is attached as ``" " + object``:
the scored string is ``format(prompt) + " " + object``, the greedy answer is
generated from ``format(prompt)``.

``subword_units`` splits the answer into the evaluated model's tokens, as
lm-eval's ``hf`` backend tokenises a (context, continuation) pair, so that
one-token loglikelihood requests on growing prefixes reproduce teacher forcing
exactly. Pure: it sees a tokenizer (``Encoder``), never a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from belief_tasks.facts.schema import SUBJECT_SLOT, Fact, Relation, SchemaError
from belief_tasks.requests import Tokenizes, encode_request

#: ``{prompt}`` is the question, with or without its context sentence.
ANSWER_FORMATS = {
    "qa": "Question: {prompt}\nAnswer:",  # default: instruct models end their turn after a bare question
    "bare": "{prompt}",  # the paper's Table 1 text as is
}
DEFAULT_ANSWER_FORMAT = "qa"


class Encoder(Tokenizes, Protocol):
    """The evaluated model's tokenizer as the subword pieces need it: a request's tokens as the backend makes them
    (``requests.encode_request`` over ``Tokenizes``), and ``encode``: many strings at once, each as ``tok_encode``
    encodes it."""

    def encode(self, strings: Sequence[str]) -> list[list[int]]: ...


@dataclass(frozen=True)
class InterferencePrompt:
    """One of a fact's R x M accuracy prompts: frame ``frame`` behind negative context ``negative``."""

    frame: str  # the frame id ("P17_f3")
    negative: int  # index m of the negative entity i-_m
    text: str  # the formatted prompt the greedy answer is generated from


@dataclass(frozen=True)
class AnchorPrompt:
    key: str  # "positive", a frame id ("P17_f3"), or "neg0".."neg4"
    kind: str  # "positive" | "frame" | "negative"
    text: str  # the formatted prompt (context side of every request)


def answer_format(value: str | None) -> str:
    """A named format (``qa``, ``bare``) or a custom string holding ``{prompt}``."""
    name = value or DEFAULT_ANSWER_FORMAT
    fmt = ANSWER_FORMATS.get(name, name)
    if "{prompt}" not in fmt:
        raise ValueError(
            f"answer_format must be one of {sorted(ANSWER_FORMATS)} or contain '{{prompt}}', got {value!r}"
        )
    if fmt != fmt.rstrip():
        raise ValueError("answer_format must not end in whitespace: the answer is attached as ' ' + object")
    return fmt


def question(relation: Relation, frame_index: int, subject: str) -> str:
    return relation.frames[frame_index].question.replace(SUBJECT_SLOT, subject)


def in_context(fmt: str, context: str, question_text: str) -> str:
    """Table 1's templates 4 and 5: the context entity, a full stop and a space, then the question."""
    return fmt.format(prompt=f"{context}. {question_text}")


def _check(fact: Fact, relation: Relation) -> None:
    if not relation.frames:
        raise SchemaError("relation has no MONITOR prompt frames", row=relation.id, field="frames")
    if not fact.negatives:
        raise SchemaError("MONITOR needs negative entities (i-) for every fact", row=fact.id, field="negatives")


def anchor_prompts(fact: Fact, relation: Relation, fmt: str = ANSWER_FORMATS["qa"]) -> list[AnchorPrompt]:
    """Positive context, then the R frames, then the M negative contexts (Table 1, templates 4, 2, 5)."""
    _check(fact, relation)
    subject = fact.subject.label
    base = question(relation, 0, subject)
    out = [AnchorPrompt("positive", "positive", in_context(fmt, fact.object.label, base))]
    out += [
        AnchorPrompt(f.id, "frame", fmt.format(prompt=question(relation, j, subject)))
        for j, f in enumerate(relation.frames)
    ]
    out += [AnchorPrompt(f"neg{m}", "negative", in_context(fmt, n.label, base)) for m, n in enumerate(fact.negatives)]
    return out


def interference_prompts(fact: Fact, relation: Relation, fmt: str = ANSWER_FORMATS["qa"]) -> list[InterferencePrompt]:
    """The R x M prompts of the paper's average accuracy (section 4.3), frame-major: for each frame r_j
    (j = 1..R) and each negative entity i-_m (m = 1..M), ``"{i-_m}. " + r_j`` (template 5 of Table 1
    with frame r_j in place of the base question, as section 5.1 applies the interference to every
    expanded frame). For j = 1 these are the negative anchors' prompts."""
    _check(fact, relation)
    subject = fact.subject.label
    return [
        InterferencePrompt(f.id, m, in_context(fmt, n.label, question(relation, j, subject)))
        for j, f in enumerate(relation.frames)
        for m, n in enumerate(fact.negatives)
    ]


def answer_text(fact: Fact) -> str:
    """The scored continuation: the gold object after one space."""
    return " " + fact.object.label


def first_line(generated: str) -> str:
    """The greedy answer: the first non-empty line of the generation, stripped."""
    return (generated or "").strip().split("\n", 1)[0].strip()


# --- subword pieces -------------------------------------------------------------------------


@dataclass(frozen=True)
class Pieces:
    """Where one prompt's answer may be cut so that re-tokenising each prefix gives the same tokens."""

    context_ids: list[int]
    answer_ids: list[int]  # the continuation's tokens, as the backend scores them in one request
    exact: dict[int, int]  # character offset in the answer -> number of answer tokens before it


def exact_cuts(codec: Encoder, prompt: str, answer: str, candidates: Sequence[int] | None = None) -> Pieces:
    """Every character offset b (0 < b < len(answer)) at which a request on the prefix
    ``prompt + answer[:b]`` is tokenised as exactly the first t tokens of the whole pair.

    Cut b is exact when the backend, given context ``prompt + answer[:b]``, encodes it
    (after lm-eval moves trailing spaces) to ``context_ids + answer_ids[:t]`` and the
    string itself to the same ids (it is the whole string of the previous request).
    Byte-level tokens that split a character, or BPE merges that change across the cut,
    leave no exact cut there. ``candidates`` (e.g. token end offsets) narrows the offsets
    tried; every one is verified, so a wrong candidate only costs a coarser unit.
    """
    ctx, ans = encode_request(codec, prompt, answer)
    whole = ctx + ans
    pool = range(1, len(answer)) if candidates is None else candidates
    offsets = sorted({b for b in pool if 0 < b < len(answer)})
    strings = [prompt + answer[:b] for b in offsets]
    stripped = [s.rstrip() for s in strings]
    encoded = codec.encode(strings + stripped)
    plain, trimmed = encoded[: len(strings)], encoded[len(strings) :]
    exact, last = {}, 0
    for b, ids, ids_trim in zip(offsets, plain, trimmed):
        t = len(ids) - len(ctx)
        if last < t < len(ans) and ids == ids_trim == whole[: len(ids)]:
            exact[b] = t
            last = t
    return Pieces(ctx, ans, exact)


def subword_units(pieces: Sequence[Pieces], answer: str) -> list[int]:
    """Cut offsets shared by all of a fact's prompts: [0, b1, ..., len(answer)].

    Each unit between two cuts is one subword wherever the tokenizer allows (always for
    SmolLM2's BPE on FKTC, see docs/monitor.md); otherwise neighbouring tokens form one
    unit whose probability is their exact joint teacher-forced probability.
    """
    common = set.intersection(*(set(p.exact) for p in pieces)) if pieces else set()
    return [0, *sorted(common), len(answer)]


def unit_token_counts(p: Pieces, cuts: Sequence[int]) -> list[int]:
    """How many answer tokens each unit holds under this prompt."""
    pos = [0, *(p.exact[b] for b in cuts[1:-1]), len(p.answer_ids)]
    counts = [b - a for a, b in zip(pos, pos[1:])]
    if any(c <= 0 for c in counts):
        raise ValueError(f"empty subword unit at cuts {list(cuts)}")
    return counts


def prefix_requests(prompt: str, answer: str, cuts: Sequence[int]) -> list[tuple[str, str]]:
    """Route 1: one loglikelihood request per unit, (prompt + answer before the unit, the unit)."""
    return [(prompt + answer[:a], answer[a:b]) for a, b in zip(cuts, cuts[1:])]
