"""Seeded draws: every random choice is reproducible from (seed, ids).

A draw's generator is derived from the seed and the ids of what is being drawn
for (a fact id, a setting name), never from global state or process order, so the
same prompt gets the same demonstrations in any process, batch or shard.
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

DEFAULT_SEED = 1234


def derive_seed(seed: int, *keys: object) -> int:
    """A 64-bit seed from ``seed`` and any ids, stable across runs and Python versions."""
    text = "\x1f".join([str(seed), *map(str, keys)])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def request_seed(seed: int, *keys: object) -> int:
    """A request's sampling seed: ``derive_seed`` reduced to a signed 64-bit integer (below 2**63).

    Engines take a sampling seed as int64: vLLM's server refuses a larger one (``body.seed: Input
    should be less than or equal to 9223372036854775807``), and torch's ``manual_seed`` needs it too.
    ``% 2**63`` is what the ``hf`` paths always applied, so their texts stay the same."""
    return derive_seed(seed, *keys) % 2**63


def rng(seed: int, *keys: object) -> random.Random:
    return random.Random(derive_seed(seed, *keys))


def sample(items: Sequence[T], k: int, seed: int, *keys: object) -> list[T]:
    """``k`` distinct items (all of them when fewer), in drawn order."""
    items = list(items)
    return rng(seed, *keys).sample(items, min(k, len(items)))


def choice(items: Sequence[T], seed: int, *keys: object) -> T:
    return rng(seed, *keys).choice(list(items))


def hash_unit(seed: int, *keys: object) -> float:
    """A seeded number in [0, 1) from ids alone: the same ids give the same number in any dataset,
    process or order (a draw "keep when below p" keeps the same shared items everywhere)."""
    return derive_seed(seed, *keys) / 2**64


def hash_order(keys: Sequence[str], seed: int, *tag: object) -> list[int]:
    """Indices of ``keys`` from the smallest seeded hash ``derive_seed(seed, *tag, key)`` to the
    largest; equal keys hash alike, and the data order breaks ties."""
    values = [derive_seed(seed, *tag, k) for k in keys]
    return sorted(range(len(keys)), key=lambda i: (values[i], i))


def smallest_hashes(items: Sequence[T], k: int, seed: int, key: Callable[[T], str], *tag: object) -> list[T]:
    """The ``k`` items whose seeded hash of ``key(item)`` is smallest, in their own order.

    Unlike ``sample``, an item's fate depends on its key, not on the other items: two collections
    that share items with equal keys keep the shared ones alike wherever both cut at the same hash
    (coordinated sampling, a "bottom-k" sketch). Items with one key are kept or dropped together,
    save at the cut."""
    items = list(items)
    keep = set(hash_order([key(x) for x in items], seed, *tag)[:k])
    return [x for i, x in enumerate(items) if i in keep]
