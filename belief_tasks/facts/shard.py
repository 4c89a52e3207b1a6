"""A task's relations cut into N blocks, for relation shards (the ``shard`` knob, ``belief-eval --shard_by_relation``).

A shard evaluates one block: the relations of a contiguous run of the task's documents, which are in data order
(relation after relation), so the shards' records, taken shard after shard, are the unsharded run's records in its
order. The cut depends only on the documents per relation, never on the model or the process, so every shard of a
command computes the same blocks. Of the cuts into N non-empty contiguous blocks it takes the one whose heaviest block
is lightest (the shards run one after another: the heaviest sets the memory), the earliest such cut on ties.

Pure: no lm-eval.
"""

from __future__ import annotations

from typing import Iterable


class ShardCutError(ValueError):
    """More shards than relations: a shard would evaluate nothing."""


def relation_counts(relations: Iterable[str]) -> dict[str, int]:
    """Documents per relation, in the order the relations first appear (the documents' order)."""
    counts: dict[str, int] = {}
    for r in relations:
        counts[r] = counts.get(r, 0) + 1
    return counts


def cut(weights: list[int], n: int) -> list[tuple[int, int]]:
    """``n`` contiguous non-empty blocks ``[start, end)`` of ``weights`` whose largest sum is as small as possible
    (the earliest such cut); ``ShardCutError`` when there are fewer weights than blocks."""
    m = len(weights)
    if not 1 <= n <= m:
        raise ShardCutError(f"{m} relations cannot be cut into {n} blocks")
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    # best[j][i]: the lightest heaviest block of the first i weights cut into j blocks; back[j][i]: where its last
    # block starts
    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(n + 1)]
    back = [[0] * (m + 1) for _ in range(n + 1)]
    best[0][0] = 0
    for j in range(1, n + 1):
        for i in range(j, m - (n - j) + 1):
            for s in range(j - 1, i):
                value = max(best[j - 1][s], prefix[i] - prefix[s])
                if value < best[j][i]:
                    best[j][i], back[j][i] = value, s
    blocks = []
    end = m
    for j in range(n, 0, -1):
        start = back[j][end]
        blocks.append((start, end))
        end = start
    return blocks[::-1]


def block(counts: dict[str, int], k: int, n: int) -> list[str]:
    """The relations of block ``k`` (1-based) of ``n`` over ``counts`` (documents per relation, in order)."""
    names = list(counts)
    start, end = cut([counts[r] for r in names], n)[k - 1]
    return names[start:end]
