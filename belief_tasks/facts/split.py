"""A seeded split of facts into a trained half and a held-out half, keyed by the cross-dataset fact key.

Continued training on the statements of some facts asks two questions of every checkpoint: did the model
learn the facts it was trained on, and did the others stay as they were? The split that answers them is
drawn per relation by the seeded hash of each fact's ``schema.sampling_key`` (``seeding.smallest_hashes``:
the half with the smallest hashes is trained), so it depends on the fact's key alone: BEAR, BELIEF, IC-LKE
and MONITOR records of one fact fall on the same side, whatever dataset order or fact ids they carry.
A record is placed by its logged ``fact_key["key"]``.

Pure: no model, no harness.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from belief_tasks.facts import seeding
from belief_tasks.facts.budget import group_by_relation
from belief_tasks.facts.schema import FactSet, sampling_key

TRAINED, HELD_OUT = "trained", "held-out"
TAG = "training split"


@dataclass(frozen=True)
class FactSplit:
    """Sampling keys of the trained and of the held-out facts, and how they were drawn."""

    trained: frozenset[str]
    held_out: frozenset[str]
    seed: int
    share: float

    def side(self, key: str) -> str | None:
        """``TRAINED``, ``HELD_OUT``, or None for a key the split does not know."""
        return TRAINED if key in self.trained else HELD_OUT if key in self.held_out else None

    def of_record(self, record: Mapping) -> str | None:
        """The side of a logged record, from its cross-dataset key (``fact_key["key"]``)."""
        key = (record.get("fact_key") or {}).get("key")
        return self.side(key) if key else None

    def to_json(self) -> dict:
        return {
            "seed": self.seed,
            "share": self.share,
            "keyed_by": "schema.sampling_key",
            "trained": sorted(self.trained),
            "held_out": sorted(self.held_out),
        }

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> "FactSplit":
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        for field in ("trained", "held_out", "seed", "share"):
            if field not in data:
                raise ValueError(f"{path}: not a fact split (no field {field!r})")
        return cls(frozenset(data["trained"]), frozenset(data["held_out"]), int(data["seed"]), float(data["share"]))


def split_facts(fs: FactSet, seed: int = seeding.DEFAULT_SEED, share: float = 0.5) -> FactSplit:
    """Per relation, the ``round(share * n)`` facts with the smallest seeded hash of their sampling key are
    trained, the rest held out. Facts that share a key (namesakes in one relation) fall together."""
    if not 0 < share < 1:
        raise ValueError(f"share must be in (0, 1), got {share}")
    trained: set[str] = set()
    every: set[str] = set()
    for rid, facts in group_by_relation(fs.facts).items():
        key = lambda f, rel=fs.relations[rid]: sampling_key(f, rel)  # noqa: E731
        keys = list(dict.fromkeys(key(f) for f in facts))  # one unit per key
        every.update(keys)
        trained.update(seeding.smallest_hashes(keys, round(share * len(keys)), seed, str, TAG))
    return FactSplit(frozenset(trained), frozenset(every - trained), seed, share)


def facts_on(fs: FactSet, split: FactSplit, side: str) -> list:
    """The facts of ``fs`` on ``side`` of ``split``, in data order."""
    return [f for f in fs.facts if split.side(sampling_key(f, fs.relations[f.relation])) == side]


def records_on(records: Iterable[Mapping], split: FactSplit, side: str) -> list:
    """The records whose fact is on ``side``."""
    return [r for r in records if split.of_record(r) == side]
