"""Checks of the code's layout against what the docs say, as functions of a checkout root.

Each returns the problems it finds (an empty list: none). The tests call them on this checkout
(``tests/test_metric_tables.py``, ``tests/test_architecture.py``, ``tests/test_sample_data.py``) and
``tests/test_recipes.py`` on a copy changed by one of docs/architecture.md's recipes, in a process
that imports the copy's ``belief_tasks``:

* ``metric_wiring``: every task YAML names a task class of a family (which wires the family's ``METRICS``:
  ``BeliefTask.metric_table``), no YAML declares a ``metric_list``, every entry of ``METRICS`` is a ``Metric``
  with its standard error (or ``NoStderr`` with a reason), and every metric of a family that takes a budget
  declares its budgeted statistic or ``NotEstimable`` with a reason (none in a family that takes none);
* ``doc_tables``: each family's doc page (``Family.doc``) has a knob table listing the family's own knobs and a
  metric table listing exactly its ``METRICS``;
* ``layers``: every import of every module follows the layer table of docs/architecture.md; no circles;
  no module loaded by name;
* ``sample_relations``: the bundled sample's relation files are the relations its README's table lists.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

# --- metrics: one declaration --------------------------------------------------------------------------


def _task_files(root: Path) -> list[Path]:
    from lm_eval.tasks._yaml_loader import load_yaml  # tests may read lm-eval's YAML loader; the product does not

    files = sorted((root / "task_yamls").rglob("*.yaml"))
    return [p for p in files if isinstance(load_yaml(p, resolve_func=False).get("task"), str)]


def metric_wiring(root: Path) -> list[str]:
    from lm_eval.tasks._yaml_loader import load_yaml

    from belief_tasks.families import FAMILIES
    from belief_tasks.scoring.budgeted import missing
    from belief_tasks.scoring.common import Metric, NoStderr, NotEstimable
    from belief_tasks.tasks.base import BeliefTask

    problems = []
    for path in _task_files(root):
        cls = load_yaml(path).get("class")
        if not (isinstance(cls, type) and issubclass(cls, BeliefTask)) or cls.FAMILY not in FAMILIES:
            problems.append(f"{path.name}: class {cls!r} is not a BeliefTask of a family in belief_tasks.families")
    for path in sorted((root / "task_yamls").rglob("*yaml")):  # task files and included ones (_bear_common_yaml)
        if "metric_list" in (load_yaml(path, resolve_func=False, recursive=False) or {}):
            problems.append(
                f"{path.relative_to(root / 'task_yamls')}: a metric_list (the task class wires its family's METRICS)"
            )
    for name, family in FAMILIES.items():
        for metric, declared in family.metrics.items():
            if not isinstance(declared, Metric):
                problems.append(
                    f"{name}: {metric} is declared as {type(declared).__name__}, not a Metric (scoring.common)"
                )
                continue
            if not (
                callable(declared.stderr) or isinstance(declared.stderr, NoStderr) and declared.stderr.reason.strip()
            ):
                problems.append(f"{name}: metric {metric} has neither a standard error nor NoStderr with a reason")
            if isinstance(declared.budgeted, NotEstimable) and not declared.budgeted.reason.strip():
                problems.append(f"{name}: metric {metric} is NotEstimable without a reason")
            if family.budgeted is None and declared.budgeted is not None:
                problems.append(f"{name}: metric {metric} has a Metric.budgeted, but the family takes no budget (None)")
        if family.budgeted is not None:
            problems += [
                f"{name}: metric {m} declares neither a budgeted statistic nor NotEstimable (Metric.budgeted)"
                for m in missing(family.budgeted, family.metrics)
            ]
    return problems


# --- doc tables -----------------------------------------------------------------------------------------


def markdown_table(text: str, first_header: str) -> list[str] | None:
    """The first cells of the body rows of the first table whose header starts with ``| first_header |``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0] == first_header:
            rows = []
            for row in lines[i + 2 :]:
                if not row.lstrip().startswith("|"):
                    break
                rows.append(row.strip().strip("|").split("|")[0])
            return rows
    return None


def named(cells: list[str]) -> set[str]:
    """The backticked names in table cells."""
    return {name for cell in cells for name in re.findall(r"`([^`]+)`", cell)}


def doc_tables(root: Path) -> list[str]:
    from belief_tasks.data.sources import SOURCE_KNOBS
    from belief_tasks.families import FAMILIES
    from belief_tasks.options import COMMON

    problems = []
    shared = {k.name for k in COMMON + SOURCE_KNOBS}
    for name, family in FAMILIES.items():
        page = root / family.doc
        text = page.read_text(encoding="utf-8") if page.is_file() else ""
        if markdown_table(text, "knob") is None:
            problems.append(f"{name}: its doc {family.doc} has no knob table")
            continue
        knobs, own = named(markdown_table(text, "knob")), {k.name for k in family.knobs} - shared
        problems += [f"docs/{page.name}: knob table lacks {k}" for k in sorted(own - knobs)]
        problems += [f"docs/{page.name}: knob table lists {k}, no knob of {name}" for k in sorted(knobs - own - shared)]
        cells = markdown_table(text, "metric")
        metrics = named(cells or [])
        if cells is None:
            problems.append(f"docs/{page.name}: no metric table")
        problems += [f"docs/{page.name}: metric table lacks {m}" for m in family.metrics if m not in metrics]
        problems += [
            f"docs/{page.name}: metric table lists {m}, not in METRICS" for m in sorted(metrics - set(family.metrics))
        ]
    return problems


# --- layers ---------------------------------------------------------------------------------------------


def layer_table(root: Path) -> list[tuple[int, str, list[str]]]:
    """(number, name, module paths relative to belief_tasks/) of each layer in docs/architecture.md's
    fenced block under "## Layers"."""
    text = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    out = []
    for line in block.splitlines():
        m = re.match(r"\s*(\d+)\s+(\S.*?)\s{2,}(.+)$", line)
        if m:
            paths = [p.strip() for p in m.group(3).split("  ")[0].split(",")]
            out.append((int(m.group(1)), m.group(2), paths))
    return out


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: Path, path: Path, modules: set[str]) -> set[str]:
    """Our modules that ``path`` imports anywhere in it (function-level imports too)."""
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in modules and t != name}
    return out


def _package_files(root: Path) -> list[Path]:
    return [
        p
        for p in sorted((root / "belief_tasks").rglob("*.py"))
        if "sample_data" not in p.parts and "task_yamls" not in p.parts
    ]


def _layer_of(root: Path, table: list, path: Path) -> tuple[int, str] | None:
    """(number, name) of the layer whose paths hold ``path`` most specifically (a module named by its path before
    its folder, a folder before the folders around it); None when none does, or two equally specific paths do."""
    rel = path.relative_to(root / "belief_tasks").as_posix()
    hits = [
        (len(p) + (p == rel), n, name)
        for n, name, paths in table
        for p in paths
        if rel == p or (p.endswith("/") and rel.startswith(p))
    ]
    best = [h for h in hits if h[0] == max((h[0] for h in hits), default=0)]
    return (best[0][1], best[0][2]) if len(best) == 1 else None


def modules_up_to(root: Path, layer: int) -> list[str]:
    """The modules of layers 1 to ``layer``."""
    table = layer_table(root)
    return [
        module_name(root, p) for p in _package_files(root) if (_layer_of(root, table, p) or (layer + 1,))[0] <= layer
    ]


def layers(root: Path) -> list[str]:
    modules = {module_name(root, p): p for p in _package_files(root)}
    table = layer_table(root)
    problems = [] if table else ["docs/architecture.md: no layer table under '## Layers'"]

    def layer_of(path: Path) -> tuple[int, str] | None:
        return _layer_of(root, table, path)

    graph = {}
    for name, path in modules.items():
        mine = layer_of(path)
        if mine is None:
            problems.append(f"{path.relative_to(root)}: in no layer (or in several) of docs/architecture.md")
            continue
        graph[name] = imports_of(root, path, set(modules))
        if re.search(r"\bimport_module\b|__import__\(", path.read_text(encoding="utf-8")):
            problems.append(f"{path.relative_to(root)}: loads a module by name")
        for target in sorted(graph[name]):
            theirs = layer_of(modules[target])
            if theirs is not None and theirs[0] > mine[0]:
                problems.append(
                    f"{path.relative_to(root)} ({mine[1]}) imports {target} ({theirs[1]}), a layer above it"
                )
    return problems + [f"circle: {' -> '.join(c)}" for c in circles(graph)]


def lm_eval_internals(root: Path, adapter: str, public: dict[str, frozenset[str]]) -> list[str]:
    """Every import of lm-eval outside the ``adapter`` module (a path relative to the root) that is not one of
    its ``public`` routes (module -> names)."""
    problems = []
    for path in _package_files(root):
        rel = path.relative_to(root).as_posix()
        if rel == adapter:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found = [(a.name, "") for a in node.names if a.name.split(".")[0] == "lm_eval"]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "lm_eval" and not node.level:
                found = [(node.module or "", a.name) for a in node.names]
            else:
                continue
            problems += [
                f"{rel}:{node.lineno} imports {module}{'.' + name if name else ''}, not a public route of lm-eval"
                for module, name in found
                if name not in public.get(module, frozenset())
            ]
    return problems


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# --- the bundled sample's relations ---------------------------------------------------------------------


def sample_relations(root: Path) -> list[str]:
    """Every relation file of the sample is a row of its README's relation table and the other way round,
    and the loader reads each with facts and an answer space of at least 40 entities."""
    from belief_tasks.data.bundled import load_folder

    folder = root / "belief_tasks" / "sample_data"
    files = {p.stem for p in folder.glob("P*.json")}
    listed = {cell.strip() for cell in markdown_table((folder / "README.md").read_text(encoding="utf-8"), "id") or []}
    problems = [f"sample_data/README.md: no row for {r}" for r in sorted(files - listed)]
    problems += [f"sample_data/README.md: row {r} has no file" for r in sorted(listed - files)]
    fs = load_folder(folder, "sample")
    problems += [
        f"sample_data/{r}.json: no facts, or fewer than 40 answer-space entities"
        for r, rel in fs.relations.items()
        if not fs.facts_of(r) or len(rel.answer_space) < 40
    ]
    if set(fs.relations) != files:
        problems.append(f"sample_data: the loader reads {sorted(fs.relations)}, the files are {sorted(files)}")
    return problems


CHECKS = {
    "metric_wiring": metric_wiring,
    "doc_tables": doc_tables,
    "layers": layers,
    "sample_relations": sample_relations,
}


def main(root: str) -> None:
    """Print every check's problems on ``root`` as JSON (what ``tests/test_recipes.py`` runs on a copy)."""
    print(json.dumps({name: check(Path(root)) for name, check in CHECKS.items()}))
