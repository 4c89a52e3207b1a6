"""Our tasks and groups with their one-line descriptions, families and data.

lm-eval's ``ls tasks`` table has no description column, so each of our YAML files
starts with a comment line ``# <description>`` (or carries ``metadata.description``);
``belief-eval ls belief`` prints them. Read from the YAMLs alone (no lm-eval import), so
listing our tasks takes a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from belief_tasks.paths import task_yamls_dir


class _Loader(yaml.SafeLoader):
    """Reads task YAMLs without resolving lm-eval's ``!function`` tags: ``!function utils.f`` reads as
    the string ``"utils.f"``."""


_Loader.add_multi_constructor("!", lambda loader, suffix, node: getattr(node, "value", None))


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "task" | "group"
    description: str
    path: Path
    family: str = ""  # a key of belief_tasks.families.FAMILIES ("" for a group)

    @property
    def is_demo(self) -> bool:
        """One of the main job's fixed-size variants (``task_yamls/demo``)."""
        return self.path.parent.name == "demo"


def _load(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    return yaml.load(text, Loader=_Loader) or {}


def _family(path: Path, config: dict) -> str:
    """The family of a task YAML, following its ``include`` chain: a family's YAMLs sit in
    ``task_yamls/<family>/``."""
    from belief_tasks.families import FAMILIES

    family = ""
    seen: set[Path] = set()
    while path not in seen:
        seen.add(path)
        if not family and path.parent.name in FAMILIES:
            family = path.parent.name
        include = config.get("include")
        if not include:
            break
        path = (path.parent / include).resolve()
        config = _load(path) if path.is_file() else {}
    return family


def entries(root: Path | None = None) -> list[Entry]:
    out = []
    for path in sorted((root or task_yamls_dir()).rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        config = yaml.load(text, Loader=_Loader) or {}
        first = text.splitlines()[0] if text else ""
        meta: dict = config["metadata"] if isinstance(config.get("metadata"), dict) else {}
        # metadata.description wins (generated YAMLs keep their first line for a do-not-edit note)
        description = str(meta.get("description") or (first[1:].strip() if first.startswith("#") else ""))
        if "group" in config and "task" in config and isinstance(config["task"], list):
            out.append(Entry(str(config["group"]), "group", description, path))
        elif isinstance(config.get("task"), str):
            out.append(Entry(config["task"], "task", description, path, _family(path, config)))
    return out


def table() -> str:
    rows = entries()
    width = max((len(e.name) for e in rows), default=10)
    lines = [f"{'belief-tasks':<{width}}  kind   description", f"{'-' * width}  -----  -----------"]
    lines += [f"{e.name:<{width}}  {e.kind:<5}  {e.description}" for e in rows]
    return "\n".join(lines)
