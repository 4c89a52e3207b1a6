"""Reading files with errors that name the file, the row and the field."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Iterator

from belief_tasks.facts.schema import FactSet, SchemaError, validate_factset


def read_text(path: Path) -> str:
    try:
        return Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark at the start is read, not refused
    except UnicodeDecodeError as e:
        # Count lines up to the bad byte so the message names the row.
        raw = Path(path).read_bytes()
        row = raw[: e.start].count(b"\n") + 1
        raise SchemaError(f"not UTF-8 text (byte {e.start}: {e.reason})", file=str(path), row=row) from None
    except FileNotFoundError:
        raise SchemaError("file not found", file=str(path)) from None


def read_json(path: Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"invalid JSON: {e.msg}", file=str(path), row=e.lineno) from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(1-based line number, object) for each non-blank line."""
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise SchemaError(f"invalid or truncated JSON line: {e.msg}", file=str(path), row=lineno) from None
        if not isinstance(obj, dict):
            raise SchemaError(f"expected a JSON object, got {type(obj).__name__}", file=str(path), row=lineno)
        yield lineno, obj


def require(row: dict, field: str, *, file: str, lineno) -> Any:
    """A field that must be present and non-empty."""
    if field not in row:
        raise SchemaError("missing column", file=file, row=lineno, field=field)
    value = row[field]
    if (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, (list, tuple)) and not value)
    ):
        raise SchemaError("empty value", file=file, row=lineno, field=field)
    return value


def parse_list(value: Any, *, file: str, row, field: str) -> list[str]:
    """A list of strings, accepting a stringified Python/JSON list ("['a', 'b']").

    Parsed with ``ast.literal_eval`` (literals only), never ``eval``.
    """
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif hasattr(value, "tolist"):  # numpy arrays from parquet
        items = list(value.tolist())
    elif isinstance(value, str):
        try:
            items = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise SchemaError(f"not a list literal: {value[:80]!r}", file=file, row=row, field=field) from None
        if not isinstance(items, (list, tuple)):
            raise SchemaError(f"not a list: {value[:80]!r}", file=file, row=row, field=field)
        items = list(items)
    else:
        raise SchemaError(f"not a list: {type(value).__name__}", file=file, row=row, field=field)
    if not all(isinstance(x, str) for x in items):
        raise SchemaError("list items must be strings", file=file, row=row, field=field)
    return items


class Repeats:
    """Refuses an instance seen before in the same file: the error names the file, both rows and the field.

    A repeated instance would be scored twice, and every mean over facts would count it twice."""

    def __init__(
        self, file: str, field: str, what: str, why: str = "each instance may appear once, or it is scored twice"
    ):
        self.file, self.field, self.what, self.why = file, field, what, why
        self.first: dict[Any, Any] = {}

    def check(self, key: Any, row, shown: Any = None) -> None:
        first = self.first.setdefault(key, row)
        if first != row:
            shown = repr(key) if shown is None else shown
            raise SchemaError(
                f"repeats row {first} ({self.what} {shown}): {self.why}; remove one of the two rows",
                file=self.file,
                row=row,
                field=self.field,
            )


def check_size(items: list, want: int, *, file: str, row, field: str, what: str) -> None:
    """A field of a documented length (FKTC: 5 negatives): anything else is refused before any work."""
    if len(items) != want:
        raise SchemaError(
            f"{len(items):,} {what}, but the dataset's documented shape has exactly {want}",
            file=file,
            row=row,
            field=field,
        )


def load_relation_files(files: list[Path], load_one, source: str) -> FactSet:
    """A FactSet from one file per relation; ``load_one(path) -> (Relation, facts)``. Each file is
    validated on its own, so an error names the file it is in."""
    relations, facts = {}, []
    for path in files:
        rel, rel_facts = load_one(path)
        validate_factset(FactSet(source, {rel.id: rel}, rel_facts), file=str(path))
        relations[rel.id] = rel
        facts.extend(rel_facts)
    return FactSet(source, relations, facts)
