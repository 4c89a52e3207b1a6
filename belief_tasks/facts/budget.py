"""Budgeted runs: which facts a run at budget ``b`` evaluates (the ``budget`` knob).

A budget is a fraction of each relation's facts (subject-relation pairs for BELIEF, instances for
BEAR and IC-LKE, facts for MONITOR). Every prompt, template, alias and anchor of a drawn fact runs;
only the facts are sampled. The draw is a stratified simple random sample without replacement,
one stratum per relation:

* each fact gets a rank within its relation, the seeded hash ``derive_seed(seed, "budget", key)``
  of its sampling key (``schema.sampling_key``: relation and folded subject label, the same across
  datasets), so the draw depends on the seed and the keys only: never on
  the model, the process, the order of the data or on which other relations are run;
* relation ``r`` with ``N_r`` facts keeps its ``allocation(b, N_r)`` best-ranked facts. The
  allocation grows with ``b``, so the facts at 1 % are among those at 5 % (nested), and a larger
  budget re-asks only requests already answered plus new ones (``--use_cache``).

``allocation`` is ``ceil(b N_r)`` but at least ``MIN_PER_RELATION`` (2, so that every relation's
sampling variance can be estimated) and at most ``N_r``. Small relations are therefore sampled at
more than ``b``: estimators weight each relation by ``N_r / n_r`` (``belief_tasks.metrics.intervals``).

Pure: no lm-eval, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from belief_tasks.facts.seeding import derive_seed, hash_order

T = TypeVar("T")

#: facts drawn at least from every relation (fewer only when it has fewer): two make its variance estimable
MIN_PER_RELATION = 2
#: ``b * N_r`` is rounded up after this slack, so 0.05 * 100 is 5 facts, not 6 from float noise
_SLACK = 1e-9


def allocation(budget: float, population: int) -> int:
    """Facts drawn from a relation of ``population`` facts at ``budget`` (monotone in the budget)."""
    if not 0 < budget <= 1:
        raise ValueError(f"budget must lie in (0, 1], got {budget!r}")
    want = math.ceil(budget * population - _SLACK)
    return min(population, max(MIN_PER_RELATION, want))


def rank_value(seed: int, key: str) -> int:
    """The seeded hash that orders a relation's facts (lowest first)."""
    return derive_seed(seed, "budget", key)


def ranked(keys: Sequence[str], seed: int) -> list[int]:
    """Indices of ``keys`` from the lowest seeded hash to the highest. Facts with one key (namesakes,
    for a key built from labels) hash alike and are drawn together, save at the cut, where the data
    order decides."""
    return hash_order(keys, seed, "budget")


@dataclass(frozen=True)
class Draw:
    """What a budgeted run drew: per relation its population size, how many facts it drew and their keys.
    Computed once per task (``tasks.base.select_facts``) and handed on with its documents (``DocList.draw``)."""

    budget: float
    seed: int
    population: Mapping[str, int]  # relation -> N_r (facts the run could have drawn)
    drawn: Mapping[str, int]  # relation -> n_r
    keys_of: Mapping[str, frozenset] = field(default_factory=dict)  # relation -> the drawn facts' keys

    @property
    def keys(self) -> frozenset:
        """The drawn facts' keys, every relation's."""
        return frozenset().union(*self.keys_of.values())

    def over(self, relations: Iterable[str]) -> "Draw":
        """The draw of ``relations`` alone (a task that makes no document of a relation evaluates none of its
        facts, so its design leaves the relation out); the relations keep their order."""
        keep = set(relations)
        if keep >= set(self.population):
            return self
        rels = [r for r in self.population if r in keep]
        return Draw(
            self.budget,
            self.seed,
            {r: self.population[r] for r in rels},
            {r: self.drawn[r] for r in rels},
            {r: self.keys_of[r] for r in rels if r in self.keys_of},
        )

    def summary(self) -> dict:
        """What the results JSON records: budget, seed, and per relation N_r and n_r."""
        return {
            "budget": self.budget,
            "seed": self.seed,
            "facts_drawn": sum(self.drawn.values()),
            "facts_in_population": sum(self.population.values()),
            "relations": {r: {"population": self.population[r], "drawn": self.drawn[r]} for r in self.population},
        }


def drawn_rows(keys_by_relation: Mapping[str, Sequence[str]], budget: float, seed: int) -> tuple[dict, Draw]:
    """Per relation, the positions of its drawn facts (the ``allocation`` best-ranked, in data order),
    and the ``Draw`` (its ``keys``: the drawn facts' keys)."""
    population, drawn, rows, chosen = {}, {}, {}, {}
    for rel, keys in keys_by_relation.items():
        n = allocation(budget, len(keys)) if keys else 0
        population[rel], drawn[rel] = len(keys), n
        rows[rel] = sorted(ranked(keys, seed)[:n])
        chosen[rel] = frozenset(keys[i] for i in rows[rel])
    return rows, Draw(budget, seed, population, drawn, chosen)


def draw_keys(keys_by_relation: Mapping[str, Sequence[str]], budget: float, seed: int) -> Draw:
    """The draw over sampling keys, relation by relation."""
    return drawn_rows(keys_by_relation, budget, seed)[1]


def draw_facts(
    facts_by_relation: Mapping[str, Sequence[T]], budget: float, seed: int, key: Callable[[T], str]
) -> tuple[dict[str, list[T]], Draw]:
    """Each relation's drawn facts (in their data order) and the ``Draw``; ``key``: a fact's sampling key."""
    keys = {rel: [key(f) for f in facts] for rel, facts in facts_by_relation.items()}
    rows, d = drawn_rows(keys, budget, seed)
    return {rel: [facts[i] for i in rows[rel]] for rel, facts in facts_by_relation.items()}, d


def _relation_of(fact: Any) -> str:
    return fact.relation


def group_by_relation(facts: Iterable[T], relation: Callable[[T], str] = _relation_of) -> dict[str, list[T]]:
    """``{relation: facts}`` in order of first appearance."""
    out: dict[str, list[T]] = {}
    for f in facts:
        out.setdefault(relation(f), []).append(f)
    return out
