"""IC-LKE / EIC-LKE inputs (Wu et al., "Towards Reliable Latent Knowledge Estimation in LLMs").

Pure functions: facts and ``Params`` in, strings and option lists out; no model, no knob parsing.

* ``sigma``: the input σ(x, r) = x1 y1 … xn yn x (eq. 1) for one test subject,
  the object being scored as the continuation ``" " + option``.
* ``split_relation``: the training facts (in-context examples) and test facts of a
  relation: the dataset's own split (T-REx-MC), else a seeded per-relation split.
* ``choose_examples``: n training facts for one test fact, seeded, never sharing
  the test fact's subject (so the test fact itself cannot leak into σ).
* ``option_set``: the gold object plus up to ``max_options - 1`` alternatives, in
  a seeded order: T-REx-MC's ``Multiple Choices``, else the relation's answer space.
* ``eic_groups``: appendix F / C.2: several test facts placed inside one sequence
  of training facts (``EICSlot`` per test fact, see ``eic_pairs``).
* ``reference_*``: IC-LKE as the authors' code (ZeroPrompt_LKE, the commit docs/iclke.md cites) builds it:
  its string, its pandas draw of examples, its test rows and its option order.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Callable, Sequence

from belief_tasks.facts import seeding
from belief_tasks.facts.schema import Fact, Relation


@dataclass(frozen=True)
class PairFormat:
    """How subject-object pairs are joined. ``pair_sep`` ends in the space that
    starts the scored continuation (``" " + option``)."""

    name: str
    pair_sep: str
    example_sep: str

    def render(self, pairs: Sequence[Sequence[str]], subject: str) -> str:
        """``x1 y1 x2 y2 … x`` (everything before the scored object)."""
        head = self.example_sep.join(f"{x}{self.pair_sep}{y}" for x, y in pairs)
        tail = subject + self.pair_sep[:-1]
        return f"{head}{self.example_sep}{tail}" if pairs else tail


FORMATS = {
    # the paper (section 2.2): a space between every token sequence
    "space": PairFormat("space", " ", " "),
    # EIC-LKE (appendix C.2): "a space token to separate the subject and object, and a comma to
    # differentiate between different tuples"
    "space_comma": PairFormat("space_comma", " ", ", "),
    # the reference code (ZeroPrompt_LKE, example_seperator ' : ', pairs joined by ', ')
    "colon_comma": PairFormat("colon_comma", " : ", ", "),
}

#: each method's own format, when the ``format`` knob is not set
DEFAULT_FORMAT = {"iclke": "space", "eiclke": "space_comma"}

TARGET_DELIMITER = " "


def pair_format(name: str) -> PairFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown IC-LKE format {name!r}; known: {sorted(FORMATS)}") from None


#: how the in-context examples are drawn: one seeded order per relation, or a draw per test fact
DEMOS = ("relation", "fact")


@dataclass(frozen=True)
class Params:
    """What the draws below need, built from the task's knobs by ``belief_tasks.tasks.iclke.params``
    (their defaults and ranges live in its options, ``families.IclkeOptions``)."""

    seed: int
    n_examples: int  # n in eq. 1 (appendix C.1)
    max_options: int  # 1 gold + up to max_options - 1 alternatives (section 4)
    demos: str  # "relation": one seeded order per relation (reference code); "fact": drawn per test fact
    eic_lead: int  # EIC-LKE: training facts before the first test fact (appendix C.2)
    eic_every: int  # EIC-LKE: training facts between two test facts


def subject_keys(fact: Fact) -> set[str]:
    return {e.casefold() for e in fact.subject.expressions}


def split_relation(
    facts: Sequence[Fact], seed: int, train_size: int, drawn_last: Callable[[Sequence[Fact]], list[int]] | None = None
) -> tuple[list[Fact], list[Fact]]:
    """(train, test) facts of one relation.

    A dataset split (``Fact.split == "train"`` on some facts) is used as is. Otherwise
    ``min(train_size, len // 2)`` facts are training facts and the rest (in dataset order) are test
    facts: drawn seeded by the relation, or, with ``drawn_last`` (the facts' indices in the order a
    budget draws them), the ones a budget would draw last, so that a budget's test facts are the facts
    it draws in the other probes' datasets too (the ``train_split: key`` knob, docs/iclke.md).
    """
    facts = list(facts)
    if any(f.split == "train" for f in facts):
        return [f for f in facts if f.split == "train"], [f for f in facts if f.split != "train"]
    if not facts:
        return [], []
    n_train = min(train_size, len(facts) // 2)
    if drawn_last is not None:
        order = drawn_last(facts)
        train_ids = {facts[i].id for i in order[len(facts) - n_train :]}
    else:
        train_ids = {f.id for f in seeding.sample(facts, n_train, seed, "iclke-split", facts[0].relation)}
    return [f for f in facts if f.id in train_ids], [f for f in facts if f.id not in train_ids]


def demo_order(train: Sequence[Fact], seed: int, relation: str) -> list[Fact]:
    """The relation's training facts in one seeded order."""
    return seeding.sample(train, len(train), seed, "iclke-demos", relation)


def choose_examples(test: Fact, train: Sequence[Fact], params: Params) -> list[Fact]:
    """The n in-context examples for ``test``: none shares its subject."""
    banned = subject_keys(test)
    eligible = [f for f in train if not (subject_keys(f) & banned)]
    if params.demos == "fact":
        return seeding.sample(eligible, params.n_examples, params.seed, "iclke-demos", test.relation, test.id)
    keep = {f.id for f in eligible}
    return [f for f in demo_order(train, params.seed, test.relation) if f.id in keep][: params.n_examples]


def as_pairs(facts: Sequence[Fact]) -> list[list[str]]:
    return [[f.subject.label, f.object.label] for f in facts]


def option_set(fact: Fact, relation: Relation, seed: int, max_options: int = 100) -> tuple[list[str], int]:
    """(options, index of the gold object), seeded by the fact.

    Alternatives come from the fact's own choices (T-REx-MC) or else the relation's
    answer space; anything matching one of the fact's objects (label or alias,
    case-insensitively) is never an alternative. Up to ``max_options - 1`` are kept.
    """
    gold = fact.object.label
    accepted = {e.casefold() for e in fact.object_expressions}
    pool = list(fact.choices) if fact.choices else [e.label for e in relation.answer_space]
    pool = [o for o in dict.fromkeys(pool) if o.casefold() not in accepted]
    alternatives = seeding.sample(pool, max(0, max_options - 1), seed, "iclke-options", fact.id)
    options = seeding.sample([gold, *alternatives], len(alternatives) + 1, seed, "iclke-order", fact.id)
    return options, options.index(gold)


# ---------------------------------------------------------------- EIC-LKE (appendix F)


@dataclass(frozen=True)
class EICSlot:
    """One test fact inside a shared sequence, with everything before it.

    ``examples``: the training pairs before this slot; ``prior``: the earlier test
    slots of the same sequence as ``(position, subject, options)``, position = the
    number of training pairs before it. Sequence k puts option k of every test fact
    in its slot (``eic_pairs``).
    """

    group: str
    index: int
    fact: Fact
    options: list[str]
    gold_index: int
    examples: list[list[str]]
    prior: list[tuple[int, str, list[str]]]


def eic_group_size(n_train: int, params: Params) -> tuple[int, int]:
    """(lead, number of test slots) for a sequence of ``n_train`` training facts."""
    lead = min(params.eic_lead, max(1, n_train // 2))
    return lead, max(1, ceil((n_train - lead) / params.eic_every))


def eic_groups(relation: Relation, train: Sequence[Fact], test: Sequence[Fact], params: Params) -> list[list[EICSlot]]:
    """Test facts of one relation, grouped into shared sequences of training facts.

    All training facts in one seeded order (minus any sharing a subject with a test
    fact of the group); the first test fact after ``lead`` of them, then one every
    ``eic_every``. Test facts are assigned to groups in a seeded order.
    """
    order = demo_order(train, params.seed, relation.id)
    lead, size = eic_group_size(len(order), params)
    shuffled = seeding.sample(test, len(test), params.seed, "eic-groups", relation.id)
    groups = []
    for g in range(0, len(shuffled), size):
        members = shuffled[g : g + size]
        banned = set().union(*(subject_keys(f) for f in members))
        seq = as_pairs([f for f in order if not (subject_keys(f) & banned)])
        gid = f"{relation.id}_g{g // size:04d}"
        slots: list[EICSlot] = []
        prior: list[tuple[int, str, list[str]]] = []
        for i, fact in enumerate(members):
            pos = min(lead + i * params.eic_every, len(seq))
            options, gold = option_set(fact, relation, params.seed, params.max_options)
            slots.append(EICSlot(gid, i, fact, options, gold, seq[:pos], list(prior)))
            prior.append((pos, fact.subject.label, options))
        groups.append(slots)
    return groups


def eic_pairs(examples: Sequence[Sequence[str]], prior: Sequence[Sequence], k: int) -> list[list[str]]:
    """The pairs of sequence ``k`` up to a slot: training pairs with the earlier test
    subjects inserted at their positions, each with its option ``k`` (cycled when a
    fact has fewer options)."""
    out: list[list[str]] = []
    inserts = sorted(prior, key=lambda p: p[0])
    j = 0
    for pos in range(len(examples) + 1):
        while j < len(inserts) and inserts[j][0] == pos:
            _, subject, options = inserts[j]
            out.append([subject, options[k % len(options)]])
            j += 1
        if pos < len(examples):
            out.append(list(examples[pos]))
    return out


# ---------------------------------------------------------------- the reference code (ZeroPrompt_LKE)
# Read at the commit docs/iclke.md names; "construct_prompt.py:N" is latent_knowledge_extractor/construct_prompt.py.

#: the docs' ``format`` under ``reference: true`` (records: ``template_id`` "iclke-reference")
REFERENCE = "reference"
#: config/test.yaml's ``example_seperator``: between subject and object, and again before each option
REFERENCE_SEPARATOR = " : "
#: config/test.yaml's ``random_seed`` and ``test_index_end`` (rows 0 to 10 of each relation's test split)
REFERENCE_RANDOM_STATE = 10
REFERENCE_TEST_ROWS = 10


def reference_context(pairs: Sequence[Sequence[str]], subject: str) -> str:
    """construct_prompt.py:125-129: ``', '.join(f"{s} : {o} ")`` then ``f"{x} : "``.

    So a space before each comma, no comma before the test subject, and a trailing space:
    ``"s1 : o1 , s2 : o2 x : "``."""
    head = ", ".join(f"{s}{REFERENCE_SEPARATOR}{o} " for s, o in pairs)
    return f"{head}{subject}{REFERENCE_SEPARATOR}"


def reference_continuation(option: str) -> str:
    """construct_prompt.py:147: the separator once more before the option; the reference scores every token
    after the context's own (LKEs.py:64-78), so ``" : " + option``: the whole input reads ``"... x :  : y"``."""
    return f"{REFERENCE_SEPARATOR}{option}"


def reference_examples(train: Sequence[Fact], n: int, random_state: int) -> list[Fact]:
    """construct_prompt.py:60-71: the relation's training rows as a frame in dataset order (its index 0..len-1, as
    ``Dataset.filter(...).to_pandas()`` gives it), then ``frame.sample(n=n, random_state=random_state)``: one
    draw per relation, in the order pandas returns it, shared by all its test facts, whatever their subjects.

    ``n`` 0 draws nothing and keeps every training row in dataset order (the reference's ``if self.example_num:``).
    With fewer than ``n`` rows pandas refuses the draw (ValueError); we draw all of them with the same call
    (``n = len(train)``), whose order starts with the draw of any smaller ``n``."""
    import pandas as pd

    if not n:
        return list(train)
    frame = pd.DataFrame({"Subject": [f.subject.label for f in train], "Object": [f.object.label for f in train]})
    return [train[i] for i in frame.sample(n=min(n, len(frame)), random_state=random_state).index]


def reference_tests(test: Sequence[Fact], rows: int) -> list[Fact]:
    """construct_prompt.py:74-76: ``df_test.iloc[0:rows]``, the relation's first test rows in dataset order
    (``rows`` 0: every row)."""
    return list(test[:rows] if rows else test)


def reference_options(fact: Fact) -> tuple[list[str], int]:
    """construct_prompt.py:138-143: the fact's ``Multiple Choices`` in dataset order, then the gold object: the
    last option, at index len - 1 (LKEs.py:109-111 reads the gold there).

    A list that already holds the gold keeps it once, last: the reference would append it a second time (and
    its first-maximum rule would then give the earlier copy every tie, docs/iclke.md)."""
    gold = fact.object.label
    options = [c for c in fact.choices if c != gold] + [gold]
    return options, len(options) - 1
