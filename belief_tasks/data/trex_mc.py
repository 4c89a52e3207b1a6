"""T-REx-MC (``QinyuanWu/T-Rex-MC``; train 5,000 / test 20,000; 50 relations).

Columns: ``Relation_ID``, ``Relation Name``, ``Subject``, ``Object``,
``Multiple Choices`` (a stringified Python list, parsed with ``ast.literal_eval``,
never ``eval``), ``Title``, ``Text``. A fact's choices are its multiple choices plus
the gold object when the list lacks it (the IC-LKE paper's 100 options).

The hub numbers the relations (``Relation_ID`` 1, 2, ...). For the cross-dataset fact key
(``schema.FactKey``) a relation's Wikidata property id is its ``Relation_ID`` where that is one
(``P36``), else its ``Relation Name`` looked up in ``PROPERTY_IDS``; a relation found in neither
keeps its own id and joins no other dataset.
"""

from __future__ import annotations

import re

from belief_tasks.data.io import Repeats, parse_list
from belief_tasks.data.sources import Source
from belief_tasks.data.tables import Rows, load_rows, require_columns
from belief_tasks.facts.schema import Entity, Fact, FactSet, Relation, SchemaError, check_label, validate_factset

COLUMNS = ("Relation_ID", "Subject", "Object", "Multiple Choices")
SPLITS = ("train", "test")
#: the documented shape (the IC-LKE paper, appendix A.2): the gold object and 99 alternatives
MAX_CHOICES = 100

#: Wikidata property labels -> ids, for the relation names of the IC-LKE paper's Table 3
#: (arXiv 2404.12957) that are property labels, and the two the dataset card quotes ("country",
#: "member of sports team"). "screen writer" is the paper's spelling of "screenwriter".
PROPERTY_IDS = {
    "date of birth": "P569",
    "date of death": "P570",
    "director": "P57",
    "father": "P22",
    "mother": "P25",
    "spouse": "P26",
    "child": "P40",
    "sibling": "P3373",
    "composer": "P86",
    "student of": "P1066",
    "instance of": "P31",
    "cast member": "P161",
    "genre": "P136",
    "contains the administrative territorial entity": "P150",
    "educated at": "P69",
    "parent taxon": "P171",
    "screenwriter": "P58",
    "screen writer": "P58",
    "performer": "P175",
    "capital": "P36",
    "producer": "P162",
    "named after": "P138",
    "developer": "P178",
    "publisher": "P123",
    "founded by": "P112",
    "drafted by": "P647",
    "part of the series": "P179",
    "manufacturer": "P176",
    "production company": "P272",
    "cause of death": "P509",
    "has subsidiary": "P355",
    "point in time": "P585",
    "inception": "P571",
    "publication date": "P577",
    "languages spoken, written or signed": "P1412",
    "original language of film or TV show": "P364",
    "official language": "P37",
    "native language": "P103",
    "position played on team / speciality": "P413",
    "original broadcaster": "P449",
    "record label": "P264",
    "author": "P50",
    "discoverer or inventor": "P61",
    "characters": "P674",
    "lyrics by": "P676",
    "distributed by": "P750",
    "home venue": "P115",
    "country": "P17",
    "member of sports team": "P54",
}
_PROPERTY = re.compile(r"^P\d+$")
_BY_NAME = {" ".join(k.casefold().split()): v for k, v in PROPERTY_IDS.items()}


def property_id(relation_id: str, name: str) -> str | None:
    """The Wikidata property id of a T-REx-MC relation (None when neither its id nor its name gives one)."""
    if _PROPERTY.match(relation_id):
        return relation_id
    return _BY_NAME.get(" ".join(name.casefold().split()))


def rows_to_facts(rows: Rows | list[dict], split: str, file: str) -> tuple[dict[str, str], list[Fact]]:
    require_columns(rows, COLUMNS, file)
    names: dict[str, str] = {}
    facts: list[Fact] = []
    # one row per fact of a split; not checked against the published copy, which is out of reach offline
    repeats = Repeats(file, "Object", "the same Relation_ID, Subject and Object")
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
        if len(choices) > MAX_CHOICES:
            raise SchemaError(
                f"{len(choices):,} choices, but T-REx-MC's documented shape has at most {MAX_CHOICES} (the "
                "gold object and 99 alternatives)",
                file=file,
                row=i,
                field="Multiple Choices",
            )
        repeats.check((rid, sub, obj), i, f"{rid} {sub!r} -> {obj!r}")
        if len(set(choices)) != len(choices):
            dup = sorted({c for c in choices if choices.count(c) > 1})
            raise SchemaError(f"duplicated choices {dup[:3]}", file=file, row=i, field="Multiple Choices")
        if obj not in choices:
            choices.append(obj)
        facts.append(Fact(f"{split}_{i}", rid, Entity(sub), (Entity(obj),), choices=tuple(choices), split=split))
    return names, facts


def load_trex_mc(source: Source) -> FactSet:
    names: dict[str, str] = {}
    facts: list[Fact] = []
    files: list[str] = []
    for split in SPLITS:
        file, rows = load_rows(source, split)
        files.append(file)
        split_names, split_facts = rows_to_facts(rows, split, file)
        names.update(split_names)
        facts.extend(split_facts)
    space: dict[str, dict[str, Entity]] = {}
    for f in facts:
        space.setdefault(f.relation, {}).setdefault(f.object.label, f.object)
    relations = {
        rid: Relation(rid, name, "N:1", answer_space=tuple(space[rid].values()), property_id=property_id(rid, name))
        for rid, name in names.items()
    }
    return validate_factset(FactSet("trex_mc", relations, facts), file=" + ".join(dict.fromkeys(files)))
