"""MyriadLAMA (``iszhaoxin/MyriadLAMA``, split ``train``) into the fact schema.

One hub row per subject-relation pair (``uuid``) and template. Columns: ``uuid``,
``rel_uri``, ``sub_ent``, ``obj_uris``, ``obj_ents``, ``obj_aliases``, ``template``
(with ``[X]``/``[Y]``), ``is_manual``. A pair's distinct ``sub_ent`` values are its
subject expressions (first seen = label). A template is a question when its text
has a ``?`` before ``[Y]`` (MyriadLAMA's QA-style templates). Template ids are
``<relation>_t<k>`` in order of first appearance, which the fixed dataset order
makes stable.

Ids for the cross-dataset fact key (``schema.FactKey``): ``obj_uris`` are the objects' Wikidata
ids; a ``sub_uri`` column, where a copy has one, is the subject's (public loaders show none).
"""

from __future__ import annotations

from typing import Iterable, Sized

from belief_tasks.data.io import Repeats, parse_list
from belief_tasks.data.sources import Source
from belief_tasks.data.tables import load_rows, require_columns
from belief_tasks.facts.schema import (
    Entity,
    Fact,
    FactSet,
    Relation,
    SchemaError,
    Template,
    TemplateKind,
    check_label,
    check_template_text,
    validate_factset,
)

COLUMNS = ("uuid", "rel_uri", "sub_ent", "obj_ents", "template")
#: rows from which reading them shows a progress bar
PROGRESS_ROWS = 200_000


def _subject_forms(value, *, file, row) -> list[str]:
    if isinstance(value, dict):
        forms = [value.get("label"), *(value.get("aliases") or [])]
    elif isinstance(value, (list, tuple)) or hasattr(value, "tolist"):
        forms = list(value)
    else:
        forms = [value]
    forms = [check_label(f, file=file, row=row, field="sub_ent") for f in forms if f is not None]
    if not forms:
        raise SchemaError("empty subject", file=file, row=row, field="sub_ent")
    return forms


def _subject_id(row: dict) -> str | None:
    """The subject's Wikidata id from an optional ``sub_uri`` column (None where absent or blank)."""
    value = row.get("sub_uri")
    return value.strip() if isinstance(value, str) and value.strip() else None


def template_kind(text: str) -> TemplateKind:
    return "question" if "?" in text.split("[Y]")[0] else "statement"


def _objects(r: dict, file: str, i: int) -> tuple[Entity, ...]:
    """The gold objects of row ``i`` (its pair's first row), with their aliases and ids."""
    objs = parse_list(r.get("obj_ents"), file=file, row=i, field="obj_ents")
    if not objs:
        raise SchemaError("no object", file=file, row=i, field="obj_ents")
    aliases = r.get("obj_aliases")
    aliases = (
        list(aliases)
        if aliases is not None and not isinstance(aliases, str)
        else parse_list(aliases or "[]", file=file, row=i, field="obj_aliases")
    )
    # obj_aliases: one list per object, or one flat list for a single object.
    if aliases and not isinstance(aliases[0], (list, tuple)) and not hasattr(aliases[0], "tolist"):
        aliases = [aliases] + [[]] * (len(objs) - 1)
    ids = r.get("obj_uris")
    ids = (
        list(ids)
        if ids is not None and not isinstance(ids, str)
        else parse_list(ids or "[]", file=file, row=i, field="obj_uris")
    )
    return tuple(
        Entity(
            check_label(o, file=file, row=i, field="obj_ents"),
            tuple(str(a) for a in (list(aliases[k]) if k < len(aliases) else []) if str(a).strip()),
            ids[k] if k < len(ids) else None,
        )
        for k, o in enumerate(objs)
    )


def _pair(pairs: dict[str, dict], uuid: str, rid: str, r: dict, file: str, i: int) -> dict:
    """The record of row ``i``'s subject-relation pair: the one its first row made, or a new one from this row."""
    pair = pairs.get(uuid)
    if pair is not None and pair["relation"] != rid:  # the pair's later rows would be read as its first
        raise SchemaError(
            f"uuid {uuid!r} is relation {pair['relation']!r} in row {pair['row']}, {rid!r} here",
            file=file,
            row=i,
            field="rel_uri",
        )
    if pair is None:
        objects = _objects(r, file, i)
        pair = pairs[uuid] = {"relation": rid, "row": i, "forms": [], "objects": objects, "subject_id": _subject_id(r)}
    return pair


def _add_answer_spaces(relations: dict[str, Relation], facts: list[Fact]) -> None:
    """Give each relation its answer space: the distinct gold objects of its facts, in order of first appearance."""
    space: dict[str, dict[str, Entity]] = {}
    for f in facts:
        for o in f.objects:
            space.setdefault(f.relation, {}).setdefault(o.label, o)
    for rid, rel in relations.items():
        relations[rid] = Relation(
            rel.id, rel.name, rel.cardinality, rel.templates, rel.frames, tuple(space.get(rid, {}).values())
        )


def rows_to_factset(rows: Iterable[dict], file: str) -> FactSet:
    """The fact set of MyriadLAMA rows; ``rows`` may be a stream (each row is read once)."""
    templates: dict[str, dict[str, Template]] = {}
    pairs: dict[str, dict] = {}
    repeats = Repeats(
        file,
        "template",
        "the same uuid and template",
        "MyriadLAMA's layout has one row per subject-relation pair and template",
    )
    if isinstance(rows, Sized) and len(rows) >= PROGRESS_ROWS:  # the real 2.46 M rows: tens of seconds
        from tqdm import tqdm

        rows = tqdm(rows, desc="Reading MyriadLAMA rows", unit=" rows", mininterval=2.0)
    for i, r in enumerate(rows, start=1):
        if i == 1:
            require_columns([r], COLUMNS, file)
        rid = check_label(r.get("rel_uri"), file=file, row=i, field="rel_uri")
        text = check_template_text(r.get("template"), file=file, row=i, field="template")
        rel_t = templates.setdefault(rid, {})
        if text not in rel_t:
            rel_t[text] = Template(f"{rid}_t{len(rel_t)}", text, template_kind(text), bool(r.get("is_manual", True)))
        uuid = check_label(str(r.get("uuid") or ""), file=file, row=i, field="uuid")
        repeats.check((uuid, text), i, f"{uuid!r} with {text!r}")
        pair = _pair(pairs, uuid, rid, r, file, i)
        for form in _subject_forms(r.get("sub_ent"), file=file, row=i):
            if form not in pair["forms"]:
                pair["forms"].append(form)
    if not pairs:
        require_columns([], COLUMNS, file)  # "no rows"
    relations = {
        rid: Relation(
            rid,
            rid,
            "N:1",
            templates=tuple(ts.values()),
            frames=tuple(t for t in ts.values() if t.kind == "question"),
            answer_space=(),
        )
        for rid, ts in templates.items()
    }
    facts = [
        Fact(
            uuid,
            p["relation"],
            Entity(p["forms"][0], tuple(p["forms"][1:]), p["subject_id"]),
            p["objects"],
            split="train",
        )
        for uuid, p in pairs.items()
    ]
    _add_answer_spaces(relations, facts)
    return validate_factset(FactSet("myriadlama", relations, facts), file=file)


def load_myriadlama(source: Source) -> FactSet:
    file, rows = load_rows(source, "train")
    return rows_to_factset(rows, file)
