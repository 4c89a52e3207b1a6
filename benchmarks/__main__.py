"""``python -m benchmarks NAME [options]`` runs one benchmark; ``--list`` names them all (from their docstrings,
without importing them). Run it from the checkout's root: the benchmarks measure the checkout's ``belief_tasks``."""

from __future__ import annotations

import ast
import importlib
import os
import sys
from pathlib import Path

from benchmarks import BENCHMARKS
from benchmarks.measure import OFFLINE

HERE = Path(__file__).resolve().parent
USAGE = "usage: python -m benchmarks NAME [options]   (python -m benchmarks --list; NAME --help)"


def summary(name: str) -> str:
    """The first paragraph of benchmark ``name``'s docstring, on one line."""
    doc = ast.get_docstring(ast.parse((HERE / f"{name}.py").read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n")[0].split()).replace("``", "")


def listing() -> str:
    width = max(map(len, BENCHMARKS))
    return "\n".join([USAGE, "", *(f"  {name:<{width}}  {summary(name)}" for name in BENCHMARKS)])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("--list", "-h", "--help"):
        print(listing(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"python -m benchmarks: no benchmark named {name!r}; --list names them all", file=sys.stderr)
        return 2
    for key, value in OFFLINE.items():  # before the benchmark imports transformers, which reads them once
        os.environ.setdefault(key, value)
    sys.argv = [f"python -m benchmarks {name}", *rest]  # argparse's usage line names the runner's command
    result = importlib.import_module(f"benchmarks.{name}").main(rest)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
