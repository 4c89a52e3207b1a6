"""Group token sequences by shared prefixes: a radix tree, pruned to the splits worth a forward pass.

Pure Python (no torch), so the plan can be tested and costed without a model.

Each node owns a segment of tokens (its edge label) at absolute positions
``[start, end)``; every sequence below it starts with the path from the root to
``end``. A sequence is a *leaf* of the deepest node it keeps: its remaining tokens
``seq[node.end:]`` are computed in a batch on that node's cached keys/values.
Splitting off a child costs one more (batch-1 worth of) forward rows and saves
re-encoding its segment for every sequence below it, so children that save fewer
than ``min_saving`` tokens are folded back into their parent's leaves. A node is also a
level of the tree: its rows wait for its forward. A node whose segment, repeated in each
row below it, would cost fewer than ``min_saving`` tokens is dissolved into its parent
(its children and leaves move up, its segment in front of theirs): one forward less to
wait for at the price of those tokens. ``min_saving`` is thus what one more forward is
worth in tokens.

A call's requests are planned in rounds (``rounds``): consecutive requests up to a budget of token positions,
each round its own tree, scored before the next is tokenised. What a round holds (its token lists, its tree, the
keys and values of its nodes) is bounded by the budget, not by the number of requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence, TypeVar

#: what one more forward is worth on a CPU, in tokens: ``min_shared_tokens``'s default there (hf-shared) and the
#: plan ``belief-eval --estimate`` costs (planning/cost.py)
CPU_FORWARD_TOKENS = 8


@dataclass
class PrefixNode:
    start: int  # absolute position of the segment's first token
    tokens: list[int]  # the segment (empty for the root)
    children: list["PrefixNode"] = field(default_factory=list)
    leaves: list[int] = field(default_factory=list)  # sequence indices scored in batches under this node

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    def walk(self):
        """This node and all nodes below it, parents before children."""
        yield self
        for child in self.children:
            yield from child.walk()

    def sequences(self) -> list[int]:
        """Indices of every sequence below this node."""
        return [i for node in self.walk() for i in node.leaves]


def _common_prefix_len(a: Sequence[int], b: Sequence[int], start: int) -> int:
    n = min(len(a), len(b))
    i = start
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _build(seqs: Sequence[Sequence[int]], order: list[int], depth: int, node: PrefixNode) -> None:
    """Fill ``node`` (ending at ``depth``) from ``order``: indices sorted by token sequence."""
    i = 0
    while i < len(order):
        seq = seqs[order[i]]
        if len(seq) == depth:  # nothing left after this node: scored from the node's own last position
            node.leaves.append(order[i])
            i += 1
            continue
        j = i + 1
        while j < len(order) and len(seqs[order[j]]) > depth and seqs[order[j]][depth] == seq[depth]:
            j += 1
        group = order[i:j]
        if len(group) == 1:
            node.leaves.append(group[0])
        else:  # sorted, so the group's common prefix is that of its first and last member
            end = _common_prefix_len(seqs[group[0]], seqs[group[-1]], depth)
            child = PrefixNode(depth, list(seq[depth:end]))
            _build(seqs, group, end, child)
            node.children.append(child)
        i = j


def _flat_cost(node: PrefixNode, seqs: Sequence[Sequence[int]], depth: int) -> int:
    """Tokens forwarded if every sequence below ``node`` were computed from ``depth`` with no sharing."""
    return sum(len(seqs[i]) - depth for i in node.sequences())


def tree_cost(node: PrefixNode, seqs: Sequence[Sequence[int]]) -> int:
    """Tokens forwarded to compute the tree as planned: each segment once, each leaf's remainder once."""
    return (
        len(node.tokens)
        + sum(len(seqs[i]) - node.end for i in node.leaves)
        + sum(tree_cost(c, seqs) for c in node.children)
    )


def _prune(node: PrefixNode, seqs: Sequence[Sequence[int]], min_saving: float) -> None:
    kept = []
    for child in node.children:
        _prune(child, seqs, min_saving)
        if _flat_cost(child, seqs, node.end) - tree_cost(child, seqs) >= min_saving:
            kept.append(child)
        else:
            node.leaves.extend(child.sequences())
    node.children = kept


def _dissolve(node: PrefixNode, min_saving: float) -> None:
    """Top down: a child whose segment costs fewer than ``min_saving`` tokens when repeated in each of
    its rows (children and leaves) gives them to ``node``, its segment prepended to theirs."""
    kept: list[PrefixNode] = []
    pending = node.children[::-1]  # a stack, next child last: the children keep their order
    while pending:
        child = pending.pop()
        rows = len(child.children) + len(child.leaves)
        if (rows - 1) * len(child.tokens) < min_saving:
            node.leaves.extend(child.leaves)  # their rows now start at child.start
            pending.extend(
                PrefixNode(child.start, child.tokens + g.tokens, g.children, g.leaves) for g in reversed(child.children)
            )
        else:
            kept.append(child)
    node.children = kept
    for child in kept:
        _dissolve(child, min_saving)


R = TypeVar("R")


def rounds(
    requests: Iterable[tuple[R, list[int], list[int]]], budget: int
) -> Iterator[list[tuple[R, list[int], list[int]]]]:
    """``(key, context tokens, continuation tokens)`` in order, cut into rounds of at most ``budget`` token
    positions: a context counts once for the requests after it with an equal context (IC-LKE's options; hand
    requests grouped by context), each continuation in full. A request that alone passes the budget is a round of
    its own. Every position of a round's radix tree is one of these, so its nodes hold at most ``budget``."""
    batch: list[tuple[R, list[int], list[int]]] = []
    used, last = 0, None
    for key, context, continuation in requests:
        cost = len(continuation) + (0 if batch and (context is last or context == last) else len(context))
        if batch and used + cost > budget:
            yield batch
            batch, used, cost = [], 0, len(context) + len(continuation)
        batch.append((key, context, continuation))
        used, last = used + cost, context
    if batch:
        yield batch


def build_prefix_tree(seqs: Sequence[Sequence[int]], min_saving: float = 8) -> PrefixNode:
    """The radix tree of ``seqs`` (the root has an empty segment), pruned to worthwhile splits and levels."""
    order = sorted(range(len(seqs)), key=lambda i: tuple(seqs[i]))
    root = PrefixNode(0, [])
    _build(seqs, order, 0, root)
    _prune(root, seqs, min_saving)
    _dissolve(root, min_saving)
    return root


def distinct_tokens(seqs: Sequence[Sequence[int]]) -> int:
    """The floor of the work: the number of positions in the full trie (distinct (prefix, token) pairs).

    Sorted neighbours share the longest prefixes, so each sequence adds its length minus
    its common prefix with the previous one.
    """
    ordered = sorted(tuple(s) for s in seqs)
    total = 0
    prev_seq: tuple[int, ...] = ()
    for seq in ordered:
        total += len(seq) - _common_prefix_len(prev_seq, seq, 0)
        prev_seq = seq
    return total
