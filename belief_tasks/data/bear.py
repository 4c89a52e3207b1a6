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

from belief_tasks.data.io import read_json, read_jsonl, require
from belief_tasks.schema import (
    Entity, Fact, FactSet, Relation, SchemaError, Template, check_label, check_template_text, validate_factset,
)
from belief_tasks.sources import inside

log = logging.getLogger(__name__)

ROW_FIELDS = ("sub_id", "sub_label", "sub_aliases", "obj_id", "obj_label")

#: Known defects of the published data, skipped with a warning and counted in
#: ``FactSet.skipped`` (docs/data.md). Anything else malformed is an error.
KNOWN_DEFECTS = {
    ("P291", "Q631134"): "BEAR-big P291.jsonl row 41 has an empty sub_label upstream",
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
    meta = read_json(meta_path)
    info = _find_relation_info(folder)
    relations: dict[str, Relation] = {}
    facts: list[Fact] = []
    skipped: list[str] = []
    file = str(meta_path)
    for rid, rmeta in meta.items():
        rel_path = inside(folder, f"{rid}.jsonl", file=file, row=rid, field="relation id")
        if not rel_path.is_file():
            continue  # BEAR-big's metadata lists one relation without instances
        templates = []
        for i, text in enumerate(require(rmeta, "templates", file=file, lineno=rid)):
            check_template_text(text, file=file, row=rid, field=f"templates[{i}]")
            templates.append(Template(f"{rid}_t{i}", text, "statement", True))
        rfile = str(rel_path)
        rel_facts: list[Fact] = []
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
            rel_facts.append(Fact(f"{rid}_{lineno}", rid, sub, (obj,), split="test"))
        if not rel_facts:
            raise SchemaError("no instances", file=rfile)
        labels = rmeta.get("answer_space_labels")
        if labels is not None:
            ids = rmeta.get("answer_space_ids") or [None] * len(labels)
            if not labels:
                raise SchemaError("empty answer space", file=file, row=rid, field="answer_space_labels")
            space = tuple(Entity(check_label(l, file=file, row=rid, field="answer_space_labels"), (), i) for l, i in zip(labels, ids))
        else:
            space = tuple({f.object.label: f.object for f in rel_facts}.values())
        space_labels = {e.label for e in space}
        for f in rel_facts:
            if f.object.label not in space_labels:
                raise SchemaError(
                    f"gold object {f.object.label!r} missing from the answer space", file=rfile, row=f.id.rsplit("_", 1)[1], field="obj_label"
                )
        one_to_one = len({f.object.label for f in rel_facts}) == len(rel_facts)
        relations[rid] = Relation(
            id=rid,
            name=rid,
            cardinality="1:1" if one_to_one else "N:1",
            templates=tuple(templates),
            answer_space=space,
            domains=tuple((info.get(rid) or {}).get("domains", ())),
        )
        facts.extend(rel_facts)
    if not relations:
        raise SchemaError("no relation files found next to metadata_relations.json", file=str(folder))
    return validate_factset(FactSet(source, relations, facts, skipped), file=str(folder))


def find_layout(root: Path, config: str) -> Path:
    """The folder for ``config`` ("BEAR" / "BEAR_big") inside a downloaded snapshot."""
    names = {"BEAR": ("BEAR",), "BEAR_big": ("BEAR-big", "BEAR_big")}[config]
    for meta in sorted(root.rglob("metadata_relations.json")):
        if meta.parent.name in names:
            return meta.parent
    raise SchemaError(f"no {'/'.join(names)}/metadata_relations.json in the downloaded copy", file=str(root))
