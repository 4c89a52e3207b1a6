"""BEAR and BEAR-big in the lm-pub-quiz on-disk layout.

A folder holds ``metadata_relations.json`` (per relation: ``templates``, and for BEAR
``answer_space_labels``/``answer_space_ids``) and one ``<relation>.jsonl`` per
relation (rows: ``sub_id``, ``sub_label``, ``sub_aliases``, ``obj_id``,
``obj_label``, optionally ``answer_idx``). ``relation_info.json`` (domains) sits
in the folder or its parent. BEAR-big has no answer space in its metadata: as in
lm-pub-quiz, it is the relation's distinct objects in order of first appearance.

Cardinality: BEAR's "1:1" relations have one instance per answer; all others are
the paper's "1:N" relations (many subjects share an answer), stored as ``"N:1"``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from belief_tasks.data.io import Repeats, read_json, read_jsonl, require
from belief_tasks.data.sources import inside
from belief_tasks.facts.schema import (
    Entity,
    Fact,
    FactSet,
    Relation,
    SchemaError,
    Template,
    check_label,
    check_template_text,
    validate_factset,
)

log = logging.getLogger(__name__)

ROW_FIELDS = ("sub_id", "sub_label", "sub_aliases", "obj_id", "obj_label")

#: Known defects of the published data, skipped with a warning and counted in
#: ``FactSet.skipped`` (docs/data.md). Anything else malformed is an error.
KNOWN_DEFECTS: dict[tuple[str, Any], str] = {
    ("P291", "Q631134"): "BEAR-big P291.jsonl row 41 has an empty sub_label upstream"
}
#: relations the published metadata declares without an instance file (BEAR-big lists P414)
KNOWN_MISSING_FILES = {
    ("bear_big", "P414"): "BEAR-big's metadata_relations.json declares P414, which has no P414.jsonl upstream"
}


def _find_relation_info(folder: Path) -> dict:
    for candidate in (folder / "relation_info.json", folder.parent / "relation_info.json"):
        if candidate.is_file():
            return read_json(candidate)
    return {}


def load_bear_folder(folder: str | Path, source: str = "bear") -> FactSet:
    """Read and validate a whole lm-pub-quiz folder (BEAR or BEAR-big)."""
    folder = Path(folder)
    meta_path = folder / "metadata_relations.json"
    if not meta_path.is_file():
        raise SchemaError("metadata_relations.json not found (not an lm-pub-quiz dataset folder)", file=str(folder))
    meta, info = read_json(meta_path), _find_relation_info(folder)
    fs = FactSet(source, {}, [], [])
    for rid, rmeta in meta.items():
        rel_path = inside(folder, f"{rid}.jsonl", file=str(meta_path), row=rid, field="relation id")
        if not rel_path.is_file():
            known = KNOWN_MISSING_FILES.get((source, rid))
            if known is None:
                raise SchemaError(
                    f"relation {rid} is declared here but its file {rel_path} does not exist",
                    file=str(meta_path),
                    row=rid,
                )
            log.warning("skipping a known defect: %s", known)
            fs.skipped.append(f"{meta_path}:{rid}: {known}")
            continue
        relation, facts = _load_relation(rid, rmeta, rel_path, str(meta_path), info, fs.skipped)
        fs.relations[rid] = relation
        fs.facts.extend(facts)
    if not fs.relations:
        raise SchemaError("no relation files found next to metadata_relations.json", file=str(folder))
    return validate_factset(fs, file=str(folder))


def _load_relation(
    rid: str, rmeta: dict, rel_path: Path, file: str, info: dict, skipped: list
) -> tuple[Relation, list[Fact]]:
    templates = []
    for i, text in enumerate(require(rmeta, "templates", file=file, lineno=rid)):
        check_template_text(text, file=file, row=rid, field=f"templates[{i}]")
        templates.append(Template(f"{rid}_t{i}", text, "statement", True))
    space = _declared_answer_space(rid, rmeta, file)
    facts = _read_instances(rid, rel_path, space, skipped)
    if space is None:  # BEAR-big: the relation's distinct objects, in order of first appearance
        space = tuple({f.object.label: f.object for f in facts}.values())
    labels = {e.label for e in space}
    for f in facts:
        if f.object.label not in labels:
            raise SchemaError(
                f"gold object {f.object.label!r} missing from the answer space",
                file=str(rel_path),
                row=f.id.rsplit("_", 1)[1],
                field="obj_label",
            )
    one_to_one = len({f.object.label for f in facts}) == len(facts)
    relation = Relation(
        id=rid,
        name=rid,
        cardinality="1:1" if one_to_one else "N:1",
        templates=tuple(templates),
        answer_space=space,
        domains=tuple((info.get(rid) or {}).get("domains", ())),
    )
    return relation, facts


def _declared_answer_space(rid: str, rmeta: dict, file: str) -> tuple[Entity, ...] | None:
    """BEAR's ``answer_space_labels`` / ``answer_space_ids`` (None when the metadata has none)."""
    labels = rmeta.get("answer_space_labels")
    if labels is None:
        return None
    if not labels:
        raise SchemaError("empty answer space", file=file, row=rid, field="answer_space_labels")
    ids = rmeta.get("answer_space_ids") or [None] * len(labels)
    if len(ids) != len(labels):
        raise SchemaError(f"{len(ids)} ids for {len(labels)} labels", file=file, row=rid, field="answer_space_ids")
    dupes = sorted({label for label in labels if labels.count(label) > 1})
    if dupes:
        raise SchemaError(f"duplicated labels {dupes[:5]}", file=file, row=rid, field="answer_space_labels")
    return tuple(
        Entity(check_label(label, file=file, row=rid, field="answer_space_labels"), (), i)
        for label, i in zip(labels, ids)
    )


def _read_instances(rid: str, rel_path: Path, space: tuple[Entity, ...] | None, skipped: list) -> list[Fact]:
    rfile, facts = str(rel_path), []
    # one instance per subject: real BEAR and BEAR-big repeat no sub_id (docs/data.md)
    by_id, by_label = (
        Repeats(rfile, "sub_id", "the same sub_id"),
        Repeats(rfile, "sub_label", "no sub_id, the same sub_label"),
    )
    for lineno, row in read_jsonl(rel_path):
        defect = KNOWN_DEFECTS.get((rid, row.get("sub_id")))
        if defect and not str(row.get("sub_label") or "").strip():
            log.warning("skipping a known defect: %s", defect)
            skipped.append(f"{rfile}:{lineno}: {defect}")
            continue
        for fld in ("sub_label", "obj_label"):
            require(row, fld, file=rfile, lineno=lineno)
        sub = Entity(
            check_label(row["sub_label"], file=rfile, row=lineno, field="sub_label"),
            tuple(a for a in row.get("sub_aliases") or () if isinstance(a, str) and a.strip()),
            row.get("sub_id"),
        )
        obj = Entity(check_label(row["obj_label"], file=rfile, row=lineno, field="obj_label"), (), row.get("obj_id"))
        if sub.id is not None:
            by_id.check(sub.id, lineno)
        else:  # a copy without ids: the subject's label is its key
            by_label.check(sub.label, lineno)
        if space is not None:
            _check_answer_index(row, obj, space, rfile, lineno)
        facts.append(Fact(f"{rid}_{lineno}", rid, sub, (obj,), split="test"))
    if not facts:
        raise SchemaError("no instances", file=rfile)
    return facts


def _check_answer_index(row: dict, obj: Entity, space: tuple[Entity, ...], file: str, lineno: int) -> None:
    """``answer_idx`` (what lm-pub-quiz grades by) and ``obj_id`` must name the same option as ``obj_label``."""
    idx = row.get("answer_idx")
    if idx is not None:
        if not isinstance(idx, int) or isinstance(idx, bool) or not 0 <= idx < len(space):
            raise SchemaError(
                f"{idx!r} is not an index into the {len(space)} answer options",
                file=file,
                row=lineno,
                field="answer_idx",
            )
        if space[idx].label != obj.label:
            raise SchemaError(
                f"answer option {idx} is {space[idx].label!r} but obj_label is {obj.label!r}",
                file=file,
                row=lineno,
                field="answer_idx",
            )
    by_label = {e.label: e for e in space}
    declared = by_label.get(obj.label)
    if obj.id is not None and declared is not None and declared.id is not None and declared.id != obj.id:
        raise SchemaError(
            f"obj_id {obj.id!r} but the answer space gives {obj.label!r} the id {declared.id!r}",
            file=file,
            row=lineno,
            field="obj_id",
        )


def find_layout(root: Path, config: str) -> Path:
    """The folder for ``config`` ("BEAR" / "BEAR_big") inside a downloaded snapshot."""
    names = {"BEAR": ("BEAR",), "BEAR_big": ("BEAR-big", "BEAR_big")}[config]
    for meta in sorted(root.rglob("metadata_relations.json")):
        if meta.parent.name in names:
            return meta.parent
    raise SchemaError(f"no {'/'.join(names)}/metadata_relations.json in the downloaded copy", file=str(root))
