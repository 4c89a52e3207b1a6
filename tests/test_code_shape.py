"""Code shape the architecture asks for: short functions (the report's Markdown builders and scripts aside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 60
#: the report's Markdown builders assemble long documents line by line: exempt by design
EXEMPT = {("belief_tasks/report", "build"), ("belief_tasks/report", "build_report")}


def long_functions() -> list[str]:
    out = []
    for folder in ("belief_tasks", "metrics", "task_yamls"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                length = node.end_lineno - node.lineno + 1
                if length > MAX_LINES and (str(rel.parent), node.name) not in EXEMPT:
                    out.append(f"{rel}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_no_function_is_longer_than_sixty_lines():
    assert long_functions() == []
