"""Our tasks and groups with their one-line descriptions.

lm-eval's ``ls tasks`` table has no description column, so each of our YAML files
starts with a comment line ``# <description>`` (or carries ``metadata.description``);
``belief-eval ls tasks`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from belief_tasks.paths import task_yamls_dir


class _Loader(yaml.SafeLoader):
    """Reads task YAMLs without resolving lm-eval's ``!function`` tags."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "task" | "group"
    description: str
    path: Path


def entries(root: Path | None = None) -> list[Entry]:
    out = []
    for path in sorted((root or task_yamls_dir()).rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        config = yaml.load(text, Loader=_Loader) or {}
        first = text.splitlines()[0] if text else ""
        meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
        # metadata.description wins (generated YAMLs keep their first line for a do-not-edit note)
        description = str(meta.get("description") or (first[1:].strip() if first.startswith("#") else ""))
        if "group" in config and "task" in config and isinstance(config["task"], list):
            out.append(Entry(str(config["group"]), "group", description, path))
        elif isinstance(config.get("task"), str):
            out.append(Entry(config["task"], "task", description, path))
    return out


def table() -> str:
    rows = entries()
    width = max((len(e.name) for e in rows), default=10)
    lines = [f"{'belief-tasks':<{width}}  kind   description", f"{'-' * width}  -----  -----------"]
    lines += [f"{e.name:<{width}}  {e.kind:<5}  {e.description}" for e in rows]
    return "\n".join(lines)
