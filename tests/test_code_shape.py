"""Code shape the architecture asks for: short functions, the report's builders and the benchmarks included
(scripts aside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 60


def long_functions() -> list[str]:
    out = []
    for folder in ("belief_tasks", "metrics", "task_yamls", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                length = node.end_lineno - node.lineno + 1
                if length > MAX_LINES:
                    out.append(f"{rel}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_no_function_is_longer_than_sixty_lines():
    assert long_functions() == []
