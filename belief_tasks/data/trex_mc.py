"""T-REx-MC (``QinyuanWu/T-Rex-MC``; train 5,000 / test 20,000; 50 relations).

Columns: ``Relation_ID``, ``Relation Name``, ``Subject``, ``Object``,
``Multiple Choices`` (a stringified Python list, parsed with ``ast.literal_eval``,
never ``eval``), ``Title``, ``Text``. A fact's choices are its multiple choices plus
the gold object when the list lacks it (the IC-LKE paper's 100 options).
"""

from __future__ import annotations

from belief_tasks.data.io import parse_list
from belief_tasks.data.tables import load_rows, require_columns
from belief_tasks.schema import Entity, Fact, FactSet, Relation, SchemaError, check_label, validate_factset
from belief_tasks.sources import Source

COLUMNS = ("Relation_ID", "Subject", "Object", "Multiple Choices")
SPLITS = ("train", "test")


def rows_to_facts(rows: list[dict], split: str, file: str) -> tuple[dict[str, str], list[Fact]]:
    require_columns(rows, COLUMNS, file)
    names, facts = {}, []
    for i, r in enumerate(rows, start=1):
        rid = r.get("Relation_ID")
        if isinstance(rid, int) and not isinstance(rid, bool):  # the hub stores relation numbers (1..), not strings
            rid = str(rid)
        rid = check_label(rid, file=file, row=i, field="Relation_ID")
        names.setdefault(rid, str(r.get("Relation Name") or rid))
        sub = check_label(r.get("Subject"), file=file, row=i, field="Subject")
        obj = check_label(r.get("Object"), file=file, row=i, field="Object")
        choices = [c.strip() for c in parse_list(r.get("Multiple Choices"), file=file, row=i, field="Multiple Choices")]
        if not choices:
            raise SchemaError("empty choice list", file=file, row=i, field="Multiple Choices")
        if len(set(choices)) != len(choices):
            dup = sorted({c for c in choices if choices.count(c) > 1})
            raise SchemaError(f"duplicated choices {dup[:3]}", file=file, row=i, field="Multiple Choices")
        if obj not in choices:
            choices.append(obj)
        facts.append(Fact(f"{split}_{i}", rid, Entity(sub), (Entity(obj),), choices=tuple(choices), split=split))
    return names, facts


def load_trex_mc(source: Source) -> FactSet:
    names, facts, files = {}, [], []
    for split in SPLITS:
        file, rows = load_rows(source, split)
        files.append(file)
        n, f = rows_to_facts(rows, split, file)
        names.update(n)
        facts.extend(f)
    space: dict[str, dict[str, Entity]] = {}
    for f in facts:
        space.setdefault(f.relation, {}).setdefault(f.object.label, f.object)
    relations = {rid: Relation(rid, name, "N:1", answer_space=tuple(space[rid].values())) for rid, name in names.items()}
    return validate_factset(FactSet("trex_mc", relations, facts), file=" + ".join(dict.fromkeys(files)))
