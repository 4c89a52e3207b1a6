"""The passes of ``vllm-shared`` and their arithmetic (``backends/prefix_cache_plan.py``), without an engine: the
engine tests (tests/engines/test_vllm_shared.py) check the same arithmetic against vLLM's own counts."""

from __future__ import annotations

import pytest

from belief_tasks.backends.prefix_cache_plan import (covered_continuation, plan_passes, readable_prefix,
                                                     simulate)

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
    """Context of 8 tokens (two blocks, the second all context): the first request computes all its 10 tokens;
    each later one reads 8 cached tokens, lacks its first continuation row and is computed again (its 2 + 10).
    Context of 6 tokens whose options share their first 2 tokens: the block of positions 4-7 (2 context tokens,
    2 continuation tokens) is written by the first such option; the second (longer than 2) reads it and is
    recomputed; an option of exactly 2 tokens cannot read it (a read stops a token short of the end)."""
    exact = [ctx(8) + [1, 2], ctx(8) + [3, 4], ctx(8) + [5]]
    got = simulate(exact, [8, 8, 8], B)
    assert got.recomputed == 2
    assert got.computed_tokens == 10 + (2 + 10) + (1 + 9)
    across = [ctx(6) + [7, 8, 9], ctx(6) + [7, 8, 1, 2], ctx(6) + [7, 8], ctx(6) + [3]]
    got = simulate(across, [6] * 4, B)
    # passes: [1] (longest, computes all 10), then [0, 2, 3]: 0 reads 8 (blocks 0-3, 4-7) -> recomputed (9);
    # 2 reads 4 (its 8 tokens allow a read of 7: one block) -> 4 computed; 3 reads 4 -> 3 computed
    assert got.recomputed == 1
    assert got.computed_tokens == 10 + (9 - 8) + 9 + (8 - 4) + (7 - 4)


def test_a_short_context_is_sent_without_a_read_and_costs_what_it_costs():
    seqs = [[1, 2, 3], [1, 2, 4]]  # BEAR: the prefix token and a statement
    assert simulate(seqs, [1, 1], B).computed_tokens == 6
    assert [p.read_cache for c in plan_passes(seqs, [1, 1], B) for p in c.passes] == [False]
