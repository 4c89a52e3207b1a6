"""Glue shared by every family's harness tasks.

* ``task_options(metadata)``: the generic knobs every task accepts through
  ``--metadata`` (or the YAML's ``metadata:``): ``seed``, ``relations``,
  ``max_facts_per_relation``.
* ``select_facts``: apply them, seeded.
* ``as_split``: docs (plain dicts) into the ``{"test": datasets.Dataset}`` that
  ``custom_dataset`` must return.
* ``with_stderr``: give a corpus-level aggregation its own standard error
  (lm-eval computes none for custom aggregations; see ``belief_tasks.harness``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from belief_tasks import seeding
from belief_tasks.schema import Fact, FactSet


@dataclass(frozen=True)
class TaskOptions:
    seed: int = seeding.DEFAULT_SEED
    relations: tuple[str, ...] | None = None
    max_facts_per_relation: int | None = None


def _as_tuple(value) -> tuple[str, ...] | None:
    if value in (None, "", []):
        return None
    if isinstance(value, str):
        return tuple(v.strip() for v in value.replace("|", ",").split(",") if v.strip())
    return tuple(str(v) for v in value)


def task_options(metadata: Mapping[str, Any] | None) -> TaskOptions:
    md = metadata or {}
    cap = md.get("max_facts_per_relation")
    return TaskOptions(
        seed=int(md.get("seed", seeding.DEFAULT_SEED)),
        relations=_as_tuple(md.get("relations")),
        max_facts_per_relation=None if cap in (None, "", "none") else int(cap),
    )


def select_facts(fs: FactSet, opts: TaskOptions) -> list[Fact]:
    """The facts this run evaluates: relation filter, then a seeded per-relation cap (order kept)."""
    rel_ids = [r for r in fs.relations if opts.relations is None or r in opts.relations]
    if opts.relations is not None:
        unknown = sorted(set(opts.relations) - set(fs.relations))
        if unknown:
            raise ValueError(f"unknown relations {unknown} for {fs.source}; known: {sorted(fs.relations)}")
    out: list[Fact] = []
    for rid in rel_ids:
        facts = fs.facts_of(rid)
        if opts.max_facts_per_relation is not None and len(facts) > opts.max_facts_per_relation:
            keep = {f.id for f in seeding.sample(facts, opts.max_facts_per_relation, opts.seed, "facts", rid)}
            facts = [f for f in facts if f.id in keep]
        out.extend(facts)
    return out


def as_split(docs: list[dict], split: str = "test"):
    """``{split: datasets.Dataset}``; nested values are kept as JSON strings so any shape fits Arrow."""
    import datasets

    if not docs:
        raise ValueError("no documents to evaluate (check relations / max_facts_per_relation)")
    flat = [{k: (json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict, tuple)) else v) for k, v in d.items()} for d in docs]
    return {split: datasets.Dataset.from_list(flat)}


def unpack(doc: Mapping[str, Any], key: str):
    """Read back a nested value stored by ``as_split``."""
    value = doc[key]
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def with_stderr(stderr: Callable[[list], float] | None) -> Callable[[Callable], Callable]:
    """Attach a standard-error function to an aggregation (``None`` marks "has none")."""

    def deco(agg: Callable) -> Callable:
        agg.stderr = stderr
        return agg

    return deco
