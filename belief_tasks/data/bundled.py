"""The bundled offline sample: facts and templates we wrote ourselves.

One JSON file per relation in ``belief_tasks/sample_data/`` (shape in its README).
"""

from __future__ import annotations

from pathlib import Path

from belief_tasks.data.io import load_relation_files, read_json, require
from belief_tasks.facts.schema import (
    Entity,
    Fact,
    FactSet,
    Relation,
    SchemaError,
    Template,
    check_label,
    check_template_text,
)
from belief_tasks.paths import sample_data_dir


def _entity(obj, *, file: str, row, field: str) -> Entity:
    if isinstance(obj, str):
        return Entity(check_label(obj, file=file, row=row, field=field))
    if not isinstance(obj, dict):
        raise SchemaError("expected a string or {label, aliases}", file=file, row=row, field=field)
    label = check_label(obj.get("label"), file=file, row=row, field=f"{field}.label")
    aliases = tuple(a.strip() for a in obj.get("aliases", []) if isinstance(a, str) and a.strip())
    return Entity(label, aliases, obj.get("id"))


def load_relation_file(path: Path) -> tuple[Relation, list[Fact]]:
    file = str(path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise SchemaError("expected a JSON object", file=file)
    rid = check_label(data.get("id"), file=file, row="header", field="id")
    templates = []
    for i, t in enumerate(require(data, "templates", file=file, lineno="header")):
        check_template_text(t.get("text"), file=file, row=f"templates[{i}]", field="text")
        kind = t.get("kind", "statement")
        if kind not in ("statement", "question"):
            raise SchemaError(
                f"kind must be statement or question, got {kind!r}", file=file, row=f"templates[{i}]", field="kind"
            )
        templates.append(Template(t.get("id") or f"{rid}_t{i}", t["text"], kind, bool(t.get("manual", True))))
    frames = []
    for i, text in enumerate(data.get("frames", [])):
        check_template_text(text, file=file, row=f"frames[{i}]", field="frames", need_object=False)
        frames.append(Template(f"{rid}_f{i}", f"{text} [Y]", "question", True))
    facts = []
    for i, f in enumerate(require(data, "facts", file=file, lineno="header")):
        row = f.get("id") or f"facts[{i}]"
        facts.append(
            Fact(
                id=f.get("id") or f"{rid}_{i:03d}",
                relation=rid,
                subject=_entity(f.get("subject"), file=file, row=row, field="subject"),
                objects=tuple(
                    _entity(o, file=file, row=row, field="objects")
                    for o in require(f, "objects", file=file, lineno=row)
                ),
                negatives=tuple(_entity(n, file=file, row=row, field="negatives") for n in f.get("negatives", [])),
                split=f.get("split"),
            )
        )
    space = [
        _entity(a, file=file, row=f"answer_space[{i}]", field="answer_space")
        for i, a in enumerate(data.get("answer_space", []))
    ]
    if not space:  # default: the distinct objects, as BEAR-big does
        space = list({o.label: o for f in facts for o in f.objects}.values())
    relation = Relation(
        id=rid,
        name=data.get("name", rid),
        cardinality=data.get("cardinality", "N:1"),
        templates=tuple(templates),
        frames=tuple(frames),
        answer_space=tuple(space),
        domains=tuple(data.get("domains", ())),
    )
    return relation, facts


def load_folder(folder: Path, source: str) -> FactSet:
    files = sorted(Path(folder).glob("P*.json"))
    if not files:
        raise SchemaError("no P*.json relation files", file=str(folder))
    return load_relation_files(files, load_relation_file, source)


def load_sample() -> FactSet:
    return load_folder(sample_data_dir(), "sample")
