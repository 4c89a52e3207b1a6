"""The one fact schema shared by every task family.

Loaders turn each source (MyriadLAMA, BEAR, FKTC, T-REx-MC, the bundled sample)
into these plain dataclasses; prompt builders and tasks only ever see them.

* ``Entity``   - a subject or object: label plus aliases (and an id when the source has one).
* ``Template`` - a prompt pattern with ``[X]`` (subject) and ``[Y]`` (object).
  ``kind`` is ``"statement"`` or ``"question"``; a question template ends with
  ``"? [Y]"`` style text, the answer slot after the question. ``manual`` tells
  hand-written templates from paraphrases (MyriadLAMA's ``is_manual``).
* ``Relation`` - id (Wikidata P-id), name, cardinality, templates, MONITOR prompt
  frames (question templates; the first is the base question), answer space.
* ``Fact``     - one subject-relation pair with all its correct objects, optional
  negative entities (FKTC's same-type distractors), optional per-fact choices
  (T-REx-MC's multiple choices) and a split name.
* ``FactSet``  - relations plus facts, with the name of the source they came from.
* ``FactKey``  - what identifies a fact across datasets, whose own fact ids are local
  (``fact_key``); ``sampling_key`` is the string a seeded draw hashes so that two datasets
  draw the same shared facts (docs/data.md, "One fact across datasets").
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal, Mapping

SUBJECT_SLOT = "[X]"
OBJECT_SLOT = "[Y]"

Cardinality = Literal["1:1", "N:1", "1:N", "N:M"]
TemplateKind = Literal["statement", "question"]


class SchemaError(ValueError):
    """Bad input data. The message names the file, the row and the field; ``task`` the task being built when it was
    raised (set by ``tasks.base.BeliefTask``: "" outside one)."""

    task: str = ""

    def __init__(
        self, message: str, *, file: str | None = None, row: int | str | None = None, field: str | None = None
    ):
        where = []
        if file is not None:
            where.append(f"file {file}")
        if row is not None:
            where.append(f"row {row}")
        if field is not None:
            where.append(f"field {field!r}")
        self.file, self.row, self.field = file, row, field
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


@dataclass(frozen=True)
class Entity:
    label: str
    aliases: tuple[str, ...] = ()
    id: str | None = None

    @property
    def expressions(self) -> tuple[str, ...]:
        """Label first, then the aliases, without duplicates."""
        return tuple(dict.fromkeys((self.label, *self.aliases)))


@dataclass(frozen=True)
class Template:
    id: str
    text: str
    kind: TemplateKind = "statement"
    manual: bool = True

    def fill(self, subject: str, obj: str | None = None) -> str:
        """Replace ``[X]`` with ``subject`` and ``[Y]`` with ``obj`` (left in place when None)."""
        text = self.text.replace(SUBJECT_SLOT, subject)
        return text if obj is None else text.replace(OBJECT_SLOT, obj)

    @property
    def question(self) -> str:
        """A question template without its answer slot: "What is the capital of [X]?"."""
        if self.kind != "question":
            raise ValueError(f"template {self.id} is a statement, not a question")
        return self.text.split(OBJECT_SLOT)[0].rstrip()


@dataclass(frozen=True)
class Relation:
    id: str
    name: str
    cardinality: Cardinality = "N:1"
    templates: tuple[Template, ...] = ()
    frames: tuple[Template, ...] = ()
    answer_space: tuple[Entity, ...] = ()
    domains: tuple[str, ...] = ()
    #: the Wikidata property id where ``id`` is not one (T-REx-MC numbers its relations)
    property_id: str | None = None

    @property
    def key_id(self) -> str:
        """The relation's id across datasets: its Wikidata property id."""
        return self.property_id or self.id

    def templates_of(self, kind: TemplateKind | None = None, manual_only: bool = False) -> tuple[Template, ...]:
        return tuple(t for t in self.templates if (kind is None or t.kind == kind) and (not manual_only or t.manual))

    @property
    def is_one_to_one(self) -> bool:
        return self.cardinality == "1:1"


@dataclass(frozen=True)
class Fact:
    id: str
    relation: str
    subject: Entity
    objects: tuple[Entity, ...]
    negatives: tuple[Entity, ...] = ()
    choices: tuple[str, ...] = ()
    split: str | None = None

    @property
    def object(self) -> Entity:
        """The first (primary) correct object."""
        return self.objects[0]

    @property
    def object_expressions(self) -> tuple[str, ...]:
        """Every accepted answer string: all objects, all their aliases."""
        return tuple(dict.fromkeys(e for o in self.objects for e in o.expressions))


@dataclass
class FactSet:
    """Relations and their facts as read from one source."""

    source: str
    relations: dict[str, Relation]
    facts: list[Fact] = field(default_factory=list)
    #: rows left out on purpose (known upstream defects), "file:row: reason"
    skipped: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[Fact]:
        return iter(self.facts)

    def __len__(self) -> int:
        return len(self.facts)

    def facts_of(self, relation_id: str, split: str | None = None) -> list[Fact]:
        return [f for f in self.facts if f.relation == relation_id and (split is None or f.split == split)]

    def subset(self, relation_ids: Iterable[str]) -> "FactSet":
        keep = set(relation_ids)
        return FactSet(
            self.source,
            {k: v for k, v in self.relations.items() if k in keep},
            [f for f in self.facts if f.relation in keep],
            self.skipped,
        )


def check_template_text(text: Any, *, file: str, row, field: str, need_object: bool = True) -> str:
    """Each template holds exactly one ``[X]`` and (when ``need_object``) exactly one ``[Y]``; returns it."""
    if not isinstance(text, str) or not text.strip():
        raise SchemaError("empty template", file=file, row=row, field=field)
    slots = [(SUBJECT_SLOT, 1)] + ([(OBJECT_SLOT, 1)] if need_object else [])
    for slot, want in slots:
        n = text.count(slot)
        if n != want:
            raise SchemaError(
                f"template {text!r} has {n} {slot} slots, expected exactly {want}", file=file, row=row, field=field
            )
    return text


def check_label(value, *, file: str, row, field: str) -> str:
    """A subject or object label must be a non-blank string."""
    if not isinstance(value, str) or not value.strip():
        raise SchemaError(f"empty or missing value {value!r}", file=file, row=row, field=field)
    return value.strip()


def validate_factset(fs: FactSet, *, file: str | None = None) -> FactSet:
    """Cross-record checks every loader runs before any model time is spent."""
    where = file or fs.source
    for rel in fs.relations.values():
        space = [e.label for e in rel.answer_space]
        if rel.answer_space:
            dupes = sorted({s for s in space if space.count(s) > 1})
            if dupes:
                raise SchemaError(
                    f"duplicated answer space entries {dupes[:5]}", file=where, row=rel.id, field="answer_space"
                )
    for i, fact in enumerate(fs.facts):
        row = fact.id if fact.id else i
        found = fs.relations.get(fact.relation)
        if found is None:
            raise SchemaError(f"unknown relation {fact.relation!r}", file=where, row=row, field="relation")
        rel = found
        if not fact.objects:
            raise SchemaError("no object", file=where, row=row, field="objects")
        gold = {e.casefold() for e in fact.object_expressions}
        for neg in fact.negatives:
            if neg.label.casefold() in gold:
                raise SchemaError(
                    f"negative entity {neg.label!r} equals the object", file=where, row=row, field="negatives"
                )
        if fact.choices:
            if len(set(fact.choices)) != len(fact.choices):
                raise SchemaError("duplicated choices", file=where, row=row, field="choices")
            if not any(o.label in fact.choices for o in fact.objects):
                raise SchemaError(
                    f"gold object {fact.object.label!r} missing from its choices", file=where, row=row, field="choices"
                )
    return fs


# --- one fact across datasets --------------------------------------------------------------------


def fold_label(text: str) -> str:
    """A label as the datasets are compared on it: NFKC, case-folded, inner whitespace collapsed.

    No accent folding and no lemmatising: subjects are names, and "Zürich" / "Zurich" or "Jones" /
    "Jone" may be different entities; the object check (``belief_tasks.facts.join``) is the looser one."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True)
class FactKey:
    """What identifies a fact across datasets; each dataset's fact ids (``P103_17``, a uuid,
    ``test_12``) are local to it.

    Two facts are the same fact when their relations are equal, their subjects are the same
    (equal Wikidata ids where both have one, else a shared folded subject expression: label or
    alias) and their gold objects agree (equal Wikidata ids where both have them, else the answer
    matching rules). ``belief_tasks.facts.join`` applies this; the key only carries what it needs.
    """

    relation: str  # Wikidata property id (the dataset's own relation id where it has none)
    subject: str  # folded subject label
    subject_id: str | None  # Wikidata item id of the subject, where the dataset gives one
    subjects: tuple[str, ...]  # folded subject expressions: the label, then the aliases
    objects: tuple[str, ...]  # gold object expressions as written: every object's label and aliases
    object_ids: tuple[str, ...]  # Wikidata ids of the gold objects; empty unless every object has one

    @property
    def text(self) -> str:
        """``"<relation>|<folded subject label>"``: the key as one string (``sampling_key``)."""
        return f"{self.relation}|{self.subject}"

    def as_record(self) -> dict[str, Any]:
        """The key as plain JSON values, for documents and logged records."""
        return {
            "key": self.text,
            "relation": self.relation,
            "subject_id": self.subject_id,
            "subjects": list(self.subjects),
            "objects": list(self.objects),
            "object_ids": list(self.object_ids),
        }

    @classmethod
    def from_record(cls, value: Mapping[str, Any]) -> "FactKey":
        subjects = tuple(value["subjects"])
        return cls(
            value["relation"],
            subjects[0],
            value.get("subject_id"),
            subjects,
            tuple(value["objects"]),
            tuple(value.get("object_ids") or ()),
        )


def fact_key(fact: Fact, relation: Relation | None = None) -> FactKey:
    """The cross-dataset key of ``fact`` (``relation``: its Relation, for a dataset whose relation ids
    are not Wikidata's; without it the fact's own relation id is used)."""
    subjects = tuple(dict.fromkeys(fold_label(s) for s in fact.subject.expressions))
    found = [_item_id(o.id) for o in fact.objects]
    ids = tuple(i for i in found if i)
    return FactKey(
        relation=relation.key_id if relation is not None else fact.relation,
        subject=subjects[0],
        subject_id=_item_id(fact.subject.id),
        subjects=subjects,
        objects=fact.object_expressions,
        object_ids=ids if len(ids) == len(found) else (),
    )


def _item_id(value: str | None) -> str | None:
    """``Q90`` from ``Q90`` or ``http://www.wikidata.org/entity/Q90``; None for no id."""
    value = (value or "").strip().rsplit("/", 1)[-1]
    return value or None


def sampling_key(fact: Fact, relation: Relation | None = None) -> str:
    """The string a seeded draw of facts hashes: ``"<relation>|<folded subject label>"``.

    The same string in every dataset for a fact they share, so a draw by a seeded hash of it picks
    the same shared facts in BEAR, BEAR-big, FKTC, MyriadLAMA and T-REx-MC. It is built from the
    subject *label*, not a Wikidata id, although ids identify better: FKTC and T-REx-MC have no ids,
    and a hash of BEAR's ``Q90`` never equals a hash of FKTC's ``"paris"``. What this costs: a fact
    two datasets share only through an alias (one dataset's label is the other's alias) hashes
    differently, and namesakes in one relation (two subjects with one label) are drawn together.
    The object is left out: its spellings differ between datasets ("Apple" / "Apple Inc.")."""
    return fact_key(fact, relation).text
