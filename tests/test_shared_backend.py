"""hf-shared against stock hf on the bundled model (float32): same numbers, less work."""

from __future__ import annotations

import pytest
import torch

from belief_tasks.backends.prefix_tree import build_prefix_tree, distinct_tokens, tree_cost
from belief_tasks.requests import encode_request, encode_requests

TOL = 1e-4  # nats

EXAMPLES = "\n".join(
    f"{s} {o}"
    for s, o in [
        ("France", "Paris"),
        ("Germany", "Berlin"),
        ("Italy", "Rome"),
        ("Japan", "Tokyo"),
        ("Egypt", "Cairo"),
        ("Canada", "Ottawa"),
        ("Kenya", "Nairobi"),
        ("Peru", "Lima"),
    ]
    * 2
)
LL_REQUESTS = [
    # IC-LKE: one long context, multi-token choices (some sharing a first token)
    *[(EXAMPLES + "\nSpain", f" {c}") for c in ["Madrid", "Barcelona", "United States", "United Kingdom", "Lisbon"]],
    (EXAMPLES + "\nSpain ", "Madrid"),  # trailing space moves to the continuation, as stock does
    # BEAR: whole statements after an empty context share their words before the answer
    *[("", f"The capital of Spain is {c}.") for c in ["Madrid", "Seville", "Bilbao", "New Delhi"]],
    ("", "Madrid"),
    # unrelated contexts, one-token choices, an exact duplicate
    ("Q: What is 2+2?\nA:", " 4"),
    ("Q: What is 2+2?\nA:", " 5"),
    ("Q: What is 2+2?\nA:", " 4"),
    ("The sky is", " blue and the grass is green"),
]
GEN = {"until": ["\n", "."], "max_gen_toks": 10, "do_sample": False}
PROMPTS = ["The capital of France is", EXAMPLES + "\nSpain", "Q: Who wrote Hamlet?\nA:"]


def instances(kind, args_list, repeats=1):
    from lm_eval.api.instance import Instance

    return [Instance(kind, {}, args, i, metadata=("t", i, repeats)) for i, args in enumerate(args_list)]


@pytest.fixture(scope="module")
def stock(model_path):
    from lm_eval.models.huggingface import HFLM

    return HFLM(
        pretrained=str(model_path), device="cpu", dtype="float32", batch_size=8, max_batch_size=8, max_length=256
    )


@pytest.fixture(scope="module")
def shared(model_path):
    from belief_tasks.backends.shared import HFSharedPrefixLM

    return HFSharedPrefixLM(
        pretrained=str(model_path), device="cpu", dtype="float32", batch_size=8, max_batch_size=8, max_length=256
    )


@pytest.fixture(scope="module")
def stock_ll(stock):
    return stock.loglikelihood(instances("loglikelihood", LL_REQUESTS), disable_tqdm=True)


def assert_same_ll(got, want):
    assert len(got) == len(want)
    for (a, ga), (b, gb) in zip(got, want):
        assert abs(a - b) < TOL, (a, b)
        assert ga == gb


# ---------------------------------------------------------------- prefix tree (pure)


def test_prefix_tree_groups_shared_prefixes():
    seqs = [
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13],
        [7, 7],
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
    ]
    root = build_prefix_tree(seqs, min_saving=1)
    assert [c.tokens for c in root.children] == [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]]
    child = root.children[0]
    assert sorted(child.leaves) == [0, 1, 2, 4] and root.leaves == [3]
    assert tree_cost(root, seqs) == distinct_tokens(seqs) == 10 + 3 + 2
    # a split saving fewer tokens than min_saving is folded back into the parent's leaves
    flat = build_prefix_tree(seqs, min_saving=1000)
    assert flat.children == [] and sorted(flat.leaves) == [0, 1, 2, 3, 4]
    assert tree_cost(flat, seqs) == sum(map(len, seqs))


def test_a_level_worth_less_than_a_forward_is_dissolved_into_its_parent():
    # every sequence starts with token 1 (a BOS); below it two templates of 5 tokens, each shared by 3 rows
    seqs = [[1, *t, x] for t in ([2, 3, 4, 5, 6], [7, 8, 9, 10, 11]) for x in (20, 21, 22)]
    kept = build_prefix_tree(seqs, min_saving=1)
    assert [c.tokens for c in kept.children] == [[1]]  # BOS alone: a level of its own (a forward to wait for)
    assert [g.tokens for g in kept.children[0].children] == [[2, 3, 4, 5, 6], [7, 8, 9, 10, 11]]
    # at min_saving 8: repeating the BOS in the 2 rows below it costs (2 - 1) x 1 token < 8, so the BOS node
    # gives its children to the root, its token in front of theirs; the templates (3 rows x 5 tokens: 10 more
    # tokens than one forward of them) stay
    root = build_prefix_tree(seqs, min_saving=8)
    assert [c.tokens for c in root.children] == [[1, 2, 3, 4, 5, 6], [1, 7, 8, 9, 10, 11]]
    assert [c.start for c in root.children] == [0, 0] and [sorted(c.leaves) for c in root.children] == [
        [0, 1, 2],
        [3, 4, 5],
    ]
    assert tree_cost(root, seqs) == tree_cost(kept, seqs) + 1
    # at 11 the templates go too (each saves 10): one level, every row from the start
    flat = build_prefix_tree(seqs, min_saving=11)
    assert flat.children == [] and sorted(flat.leaves) == list(range(6))


def test_distinct_tokens_is_the_trie_size():
    seqs = [[1, 2, 3], [1, 2, 4], [1, 5], [1, 2, 3], [6]]
    trie = {tuple(s[:n]) for s in seqs for n in range(1, len(s) + 1)}
    assert distinct_tokens(seqs) == len(trie) == 6


# ---------------------------------------------------------------- generation grouping (pure)


class Req:
    """A hand-written generate_until request (the fields lm-eval's Instance gives the plan)."""

    def __init__(self, context, gen_kwargs, doc_id=0, idx=0, task_name="t"):
        self.args = (context, gen_kwargs)
        self.doc_id, self.idx, self.task_name = doc_id, idx, task_name


def test_generation_plan_groups_prompts_rows_and_seeds():
    from belief_tasks.backends.generation_plan import Row, SamplingDefaults, kwargs_key, plan_generation
    from belief_tasks.facts.seeding import derive_seed

    greedy = {"until": ["\n"], "max_gen_toks": 10, "do_sample": False}
    sample = {"until": ["\n"], "max_gen_toks": 10, "do_sample": True, "temperature": 0.7, "top_p": 0.9}
    tagged = {"until": ["\n", "\n<belief-sample 1>"], "max_gen_toks": 10, "do_sample": True, "seed": 12}
    unseeded = Req("D", {"until": ["\n"], "max_gen_toks": 10, "do_sample": True, "top_p": 1.0}, doc_id=4, idx=1)
    reqs = [
        Req("A", greedy),
        Req("A", greedy),  # 0, 1: one greedy row
        Req("A", dict(sample, seed=11)),
        Req("A", tagged),  # 2, 3: samples of A, same stops once tagged ones go
        Req("B", greedy),
        Req("B", greedy),  # 4, 5: greedy-only prompt: stock, generated once
        Req("C", dict(greedy, repetition_penalty=1.1)),  # 6: a kwarg our decoder lacks: stock
        unseeded,
        unseeded,  # 7, 8: one Instance repeated: two draws
        Req("A", dict(greedy, max_gen_toks=5)),  # 9: another length: its own (greedy-only) group
    ]
    plan = plan_generation(reqs, eos="<eos>", max_gen_toks=256, sample_seed=1234, defaults=SamplingDefaults(top_k=50))
    assert plan.stock == [[6], [4, 5], [9]]
    a, d = plan.groups
    assert (a.context, a.until, a.max_gen) == ("A", ["\n", "<eos>"], 10)
    assert a.rows == [
        Row((0, 1), do_sample=False),
        Row((2,), do_sample=True, temperature=0.7, top_k=50, top_p=0.9, seed=11),
        Row((3,), do_sample=True, temperature=1.0, top_k=50, seed=12),
    ]
    key = kwargs_key(unseeded.args[1])
    assert d.context == "D" and d.rows == [
        Row((7,), do_sample=True, top_k=50, seed=derive_seed(1234, "t", 4, 1, 0, "D", key)),
        Row((8,), do_sample=True, top_k=50, seed=derive_seed(1234, "t", 4, 1, 1, "D", key)),
    ]
    # the seeds of unseeded samples come from sample_seed; a request's own seed does not
    other = plan_generation(reqs, eos="<eos>", max_gen_toks=256, sample_seed=99, defaults=SamplingDefaults(top_k=50))
    assert other.groups[0].rows == a.rows and other.groups[1].rows[0].seed != d.rows[0].seed


# ---------------------------------------------------------------- scoring batches (no model)


def _pool_items(lengths_by_parent, leaves=True, first_serial=0, logit_positions=10**6):
    from belief_tasks.backends.prefix_tree import PrefixNode
    from belief_tasks.backends.shared import PAD_BUDGET, _Item, _Parent, _Pool
    from belief_tasks.backends.shared_attention import SharedPrefix

    pool = _Pool(pad_budget=PAD_BUDGET, logit_positions=logit_positions)
    parents = []
    for serial, lengths in enumerate(lengths_by_parent, start=first_serial):
        prefix = SharedPrefix([torch.zeros(1, 1, 10, 2)], [torch.zeros(1, 1, 10, 2)])  # 10 cached positions
        parent = _Parent(PrefixNode(0, [1] * 10), prefix, [], serial)
        parents.append(parent)
        pool.add(
            [_Item([7] * n, parent, i if leaves else PrefixNode(10, [7] * n), 0, [7]) for i, n in enumerate(lengths)]
        )
    return pool, parents


def test_pool_batches_rows_of_one_length_across_parents():
    pool, parents = _pool_items([[40, 40, 5, 1], [40, 39, 2]])
    batches = []
    while pool:
        batch = pool.take(lambda width: max(1, 160 // width))  # a 160-token budget
        batches.append([([p is it.parent for p in parents].index(True), len(it.tokens)) for it in batch])
    # widest first, rows of one parent contiguous; the 5-token row would add 35 tokens of padding
    # (over the 32-token budget), so it starts the next batch, with the short rows of both parents
    assert batches == [[(0, 40), (0, 40), (1, 39), (1, 40)], [(0, 1), (0, 5), (1, 2)]]
    assert not pool


def test_a_batch_of_segments_with_room_takes_leaf_rows_no_wider_than_its_own():
    pool, parents = _pool_items([[6, 6]], leaves=False)  # two child segments of 6 tokens
    leaves, _ = _pool_items([[9, 5, 4, 1]], first_serial=1)  # leaf rows of another node, waiting
    pool.add(leaves.leaves)
    first = pool.take(lambda width: 4)  # 4 rows a forward
    # the two segments and the two widest leaves that fit in 6 columns (5 and 4: 3 padding); the 9-token
    # leaf would widen the batch, and the 4-row limit leaves no room for the 1-token one
    assert [(it.is_node, len(it.tokens)) for it in first] == [(True, 6), (True, 6), (False, 4), (False, 5)]
    assert [len(it.tokens) for it in pool.take(lambda width: 4)] == [1, 9]


def test_the_last_rows_join_a_batch_when_their_padding_is_worth_less_than_a_forward():
    pool, _ = _pool_items([[10, 10, 9, 3, 3, 3, 3, 3]])
    # widest first: 10, 10, 9 and four 3s carry 1 + 4 x 7 = 29 tokens of padding, a fifth 3 would make it 36
    # (over the 32-token budget); that last row would need a forward of its own for 7 tokens of padding,
    # under a forward's worth (32): it comes along
    assert [len(it.tokens) for it in pool.take(lambda width: 16)] == [3, 3, 3, 3, 3, 9, 10, 10]
    assert not pool
    pool, _ = _pool_items([[10, 10, 9, *[3] * 9]])  # five 3s left: 35 tokens of padding, more than a forward's worth
    assert [len(it.tokens) for it in pool.take(lambda width: 16)] == [3, 3, 3, 3, 9, 10, 10]
    assert [len(it.tokens) for it in pool.take(lambda width: 16)] == [3] * 5


def test_a_batch_returns_at_most_its_logit_positions():
    """Rows x the columns some row reads stay within ``logit_positions`` (every column of a leaf row is read here),
    one row whatever its width; the padding rules stay as they were."""
    pool, _ = _pool_items([[1] * 10 + [3] * 4], logit_positions=8)
    assert [len(it.tokens) for it in pool.take(lambda width: 100)] == [3, 3]  # 2 rows x 3 columns; a third: 9
    assert [len(it.tokens) for it in pool.take(lambda width: 100)] == [3, 3]
    assert [len(it.tokens) for it in pool.take(lambda width: 100)] == [1] * 8
    assert [len(it.tokens) for it in pool.take(lambda width: 100)] == [1] * 2
    assert not pool
    pool, _ = _pool_items([[20, 1]], logit_positions=8)
    assert [len(it.tokens) for it in pool.take(lambda width: 100)] == [20]  # alone, past the limit


def test_rounds_hold_at_most_the_budget_each_context_counted_once():
    from belief_tasks.backends.prefix_tree import rounds

    a, b = [1] * 10, [2] * 10
    requests = [(i, ctx, [7] * 2) for i, ctx in enumerate([a, a, a, list(a), b, b, [3] * 30, b])]
    cut = [[key for key, _, _ in part] for part in rounds(requests, 20)]
    # a's three requests: 10 + 3 x 2 positions (an equal list counts as the same context: 18); b: 10 + 2 x 2; the
    # 30-token context alone passes 20 (a round of its own); b again after it counts its context again
    assert cut == [[0, 1, 2, 3], [4, 5], [6], [7]]
    assert [key for part in rounds(requests, 10**6) for key, _, _ in part] == list(range(8))


# ---------------------------------------------------------------- shared-prefix attention (no model)


def _reference_attention(q, k, v, pk, pv, scale):
    """softmax([q pk^T, q k^T + causal]) [pv; v] per row, with the prefix copied to the row."""
    bsz, n_heads, s, d = q.shape
    group = n_heads // k.shape[1]
    keys = torch.cat([pk.expand(bsz, -1, -1, -1), k], dim=2).repeat_interleave(group, dim=1)
    vals = torch.cat([pv.expand(bsz, -1, -1, -1), v], dim=2).repeat_interleave(group, dim=1)
    p = pk.shape[2]
    mask = torch.ones(s, p + k.shape[2], dtype=torch.bool)
    mask[:, p:] = torch.tril(torch.ones(s, k.shape[2], dtype=torch.bool), diagonal=k.shape[2] - s)
    scores = (q @ keys.transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ vals).transpose(1, 2)


@pytest.mark.parametrize("way", ["gather", "loop", "fused"])
@pytest.mark.parametrize("q_len", [3, 1])
def test_rows_of_different_prefixes_attend_to_their_own(way, q_len, monkeypatch):
    """Every way of a batch with several prefixes: each row's prefix copied next to its keys and one SDPA
    call (many short prefixes on the CPU; every batch on an accelerator, ``fused``), or a loop over runs of
    rows (long prefixes on the CPU); "fused" in chunks of 2 rows. ``q_len`` 1: a decoding step, whose rows also
    hold earlier positions."""
    from belief_tasks.backends import shared_attention
    from belief_tasks.backends.shared_attention import RowPrefixes, SharedPrefix, shared_prefix_attention

    monkeypatch.setattr(shared_attention, "GATHER_POSITIONS", {"gather": 1 << 17, "loop": 0, "fused": 20}[way])
    monkeypatch.setattr(shared_attention, "FUSED", True if way == "fused" else None)

    torch.manual_seed(0)
    module = type("Layer", (), {"layer_idx": 0})()
    bsz, n_heads, n_kv, s, d = 5, 4, 2, 3, 8
    q, k, v = torch.randn(bsz, n_heads, q_len, d), torch.randn(bsz, n_kv, s, d), torch.randn(bsz, n_kv, s, d)
    prefixes = [SharedPrefix([torch.randn(1, n_kv, n, d)], [torch.randn(1, n_kv, n, d)]) for n in (4, 0, 7)]
    bounds = [0, 2, 3, 5]  # rows 0-1 read a 4-token prefix, row 2 none, rows 3-4 a 7-token one
    rows = RowPrefixes(prefixes, bounds)
    assert rows.gathers() == (way == "gather")
    got, _ = shared_prefix_attention(module, q, k, v, None, scaling=d**-0.5, shared_prefix=rows)
    for lo, hi, p in zip(bounds, bounds[1:], prefixes):
        want = _reference_attention(
            q[lo:hi],
            k[lo:hi],
            v[lo:hi],
            p.keys[0] if p.length else torch.zeros(1, n_kv, 0, d),
            p.values[0] if p.length else torch.zeros(1, n_kv, 0, d),
            d**-0.5,
        )
        assert torch.allclose(got[lo:hi], want, atol=1e-5), (lo, hi)
        alone, _ = shared_prefix_attention(module, q[lo:hi], k[lo:hi], v[lo:hi], None, scaling=d**-0.5, shared_prefix=p)
        assert torch.allclose(got[lo:hi], alone, atol=1e-6)


# ---------------------------------------------------------------- exactness on the bundled model


@pytest.mark.e2e
@pytest.mark.parametrize("batch_size", [1, 8, "auto"])
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_loglikelihood_matches_stock(shared, stock_ll, batch_size, padding_side):
    shared.batch_size_per_gpu = batch_size
    shared.tokenizer.padding_side = padding_side
    shared.stats.update(tokens_forwarded=0, forward_calls=0)
    got = shared.loglikelihood(instances("loglikelihood", LL_REQUESTS), disable_tqdm=True)
    assert_same_ll(got, stock_ll)
    assert any(g for _, g in stock_ll) and not all(g for _, g in stock_ll)  # the flags are informative
    # the shared context was encoded once, not once per choice
    stock_tokens = sum(len(c) + len(x) - 1 for _, c, x in _encoded(shared))
    assert shared.stats["tokens_forwarded"] < stock_tokens / 2


def _encoded(lm):
    return [(None, *pair) for pair in encode_requests(lm, LL_REQUESTS)]


def _held_positions(monkeypatch, lm):
    """Counts, at every forward of ``lm``, the prefix positions whose keys and values are held in memory: the own
    positions of every live ``SharedPrefix`` (found by weak reference, not from the backend's accounting).
    Returns the list the counts go to."""
    import weakref

    from belief_tasks.backends import shared_attention

    live: list[weakref.ref] = []
    init = shared_attention.SharedPrefix.__init__

    def tracked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        live.append(weakref.ref(self))

    monkeypatch.setattr(shared_attention.SharedPrefix, "__init__", tracked)
    held: list[int] = []
    call = lm._call

    def counting(*args, **kwargs):
        alive = [p for p in (ref() for ref in live) if p is not None]
        held.append(sum(p.keys[0].shape[-2] for p in alive if p.keys))
        return call(*args, **kwargs)

    monkeypatch.setattr(lm, "_call", counting)
    return held


#: IC-LKE's shape: test facts of one relation, each its own context after the same examples, five options each
FACTS = [
    (EXAMPLES + f"\n{country}", f" {city}")
    for country in ("Spain", "Poland", "Chile", "Norway")
    for city in ("Madrid", "Warsaw", "Santiago", "Oslo", "New Delhi")
]


@pytest.mark.e2e
def test_no_batch_holds_more_than_max_cached_tokens(shared, stock, monkeypatch):
    """``max_cached_tokens`` bounds the prefix positions held at once, counted before every forward: four facts of a
    relation under a cap that holds two (each fact's context, then its options), with the same numbers as stock.
    Each fact's prefix used to be a copy of the relation's whole context, and the cap was checked before a batch
    took every fact's segment (held: the examples + 4 x the context)."""
    encoded = _encoded_pairs(shared, FACTS[:5])  # one fact
    context = len(encoded[0][1])
    cap = 2 * (context + sum(len(cont) for _, _, cont in encoded)) + 4  # two facts' contexts and options, not three
    monkeypatch.setattr(shared, "max_cached_tokens", cap)
    shared.batch_size_per_gpu = "auto"
    held = _held_positions(monkeypatch, shared)
    got = shared.loglikelihood(instances("loglikelihood", FACTS), disable_tqdm=True)
    assert_same_ll(got, stock.loglikelihood(instances("loglikelihood", FACTS), disable_tqdm=True))
    assert held and max(held) <= cap, (max(held), cap)
    assert context < max(held) < 2 * context  # two facts' own positions read the examples, held once


def _encoded_pairs(lm, pairs):
    return [(None, *pair) for pair in encode_requests(lm, pairs)]


@pytest.mark.e2e
def test_the_accelerator_plan_matches_stock_in_fewer_forwards(shared, stock_ll, monkeypatch):
    """The plan ``min_shared_tokens=auto`` gives on an accelerator (a forward worth 1,028 tokens of the bundled
    model), run on the CPU: the same numbers, fewer forwards than the CPU plan, more tokens."""
    shared.batch_size_per_gpu = "auto"
    runs = {}
    for worth in (8, 1028):
        monkeypatch.setattr(shared, "min_shared_tokens", worth)
        shared.stats.update(tokens_forwarded=0, forward_calls=0)
        got = shared.loglikelihood(instances("loglikelihood", LL_REQUESTS), disable_tqdm=True)
        assert_same_ll(got, stock_ll)
        runs[worth] = dict(shared.stats)
    assert runs[1028]["forward_calls"] < runs[8]["forward_calls"]
    assert runs[1028]["tokens_forwarded"] > runs[8]["tokens_forwarded"]


@pytest.mark.e2e
def test_per_token_loglikelihood_sums_to_loglikelihood(shared, stock_ll):
    shared.batch_size_per_gpu = 8
    per_token = shared.per_token_loglikelihood(instances("per_token_loglikelihood", LL_REQUESTS), disable_tqdm=True)
    for toks, (ll, _), (_, _, cont) in zip(per_token, stock_ll, _encoded(shared)):
        assert len(toks) == len(cont)
        assert all(t <= 0 for t in toks)
        assert abs(sum(toks) - ll) < TOL


@pytest.mark.e2e
def test_min_shared_tokens_auto_is_what_a_forward_is_worth_on_the_device(shared, monkeypatch):
    assert shared.min_shared_tokens == 8  # the fixture's CPU
    assert sum(p.numel() for p in shared.model.parameters()) == 134_515_008
    monkeypatch.setattr(shared, "_device", torch.device("cuda"))
    assert shared._forward_worth() == 1028  # 1,024 tokens at 135 M parameters, scaled: 1024 x 135e6 / 134,515,008


def test_auto_batch_off_cuda_is_the_token_budget(shared, monkeypatch):
    """lm-eval's "auto" forwards max_batch_size rows of max_length and waits for CUDA's out-of-memory
    error; on a CPU that error never comes (the machine swaps). Our stock paths size "auto" by
    max_batch_tokens instead: rows = budget // (longest prompt + its new tokens)."""
    monkeypatch.setattr(shared, "batch_size_per_gpu", "auto")
    monkeypatch.setattr(shared, "max_batch_tokens", 64)
    monkeypatch.setattr(shared, "max_batch_size", 8)
    sizes, detect = [], shared._detect_batch_size
    monkeypatch.setattr(shared, "_detect_batch_size", lambda *a, **k: sizes.append(detect(*a, **k)) or sizes[-1])
    shared.generate_until(instances("generate_until", [(p, GEN) for p in PROMPTS[::2]]), disable_tqdm=True)
    longest = max(len(shared.tok_encode(p)) for p in PROMPTS[::2]) + GEN["max_gen_toks"]
    assert 8 < longest < 32  # so the budget gives 2 or 3 rows, neither 1 nor max_batch_size
    assert sizes == [64 // longest]
    assert shared._stock_generation is None  # the hint lives only during its call
    monkeypatch.setattr(shared, "max_batch_tokens", 10**6)
    assert shared._detect_batch_size() == 8  # capped by max_batch_size


@pytest.mark.e2e
def test_auto_batch_on_cuda_probes_the_generation_call_s_own_length(shared, monkeypatch):
    """On CUDA "auto" stays lm-eval's out-of-memory probe, but a stock generation call hands it its longest
    prompt plus its new tokens, not max_length (on an H200 the max_length probe took about a minute per call).
    Scoring requests and calls without prompts reach lm-eval's probe unchanged."""
    from lm_eval.models.huggingface import HFLM

    seen = []
    monkeypatch.setattr(HFLM, "_detect_batch_size", lambda self, requests=None, pos=0: seen.append(requests) or 5)
    monkeypatch.setattr(shared, "_device", torch.device("cuda"))
    monkeypatch.setattr(shared, "_stock_generation", instances("generate_until", [(p, GEN) for p in PROMPTS[::2]]))
    assert shared._detect_batch_size() == 5
    ((_, context, continuation),) = seen.pop()
    assert len(context) == max(len(shared.tok_encode(p)) for p in PROMPTS[::2]) < shared.max_length
    assert len(continuation) == GEN["max_gen_toks"]
    monkeypatch.setattr(shared, "_stock_generation", None)
    shared._detect_batch_size()
    shared._detect_batch_size([("x", [1, 2], [3])])
    assert seen == [None, [("x", [1, 2], [3])]]


@pytest.mark.e2e
@pytest.mark.parametrize("batch_size", [1, "auto"])
def test_greedy_generation_matches_stock(stock, shared, batch_size):
    shared.batch_size_per_gpu = batch_size
    want = stock.generate_until(instances("generate_until", [(p, GEN) for p in PROMPTS]), disable_tqdm=True)
    assert want[0].strip() == "Paris"
    # greedy-only prompts go through stock batching; prompts that also have samples are decoded by us
    sampled = dict(GEN, do_sample=True, temperature=1.0)
    reqs = instances("generate_until", [(p, GEN) for p in PROMPTS] + [(p, sampled) for p in PROMPTS[1:]], repeats=3)
    mixed = shared.generate_until([r for r in reqs for _ in range(r.repeats)], disable_tqdm=True)
    assert mixed[0:9:3] == want
    assert mixed[:3] == [want[0]] * 3


@pytest.mark.e2e
def test_sampling_is_seeded_and_varied(shared):
    sampled = {"until": ["\n"], "max_gen_toks": 8, "do_sample": True, "temperature": 1.0}
    reqs = instances("generate_until", [("The capital of France is", sampled)], repeats=12)
    cloned = [reqs[0]] * 12
    first = shared.generate_until(cloned, disable_tqdm=True)
    assert shared.generate_until(cloned, disable_tqdm=True) == first  # same command, same samples
    assert len(set(first)) > 3  # twelve independent draws, not one answer repeated
    shared.sample_seed += 1
    try:
        assert shared.generate_until(cloned, disable_tqdm=True) != first
    finally:
        shared.sample_seed -= 1


# ---------------------------------------------------------------- robustness


@pytest.mark.e2e
def test_long_contexts_truncated_like_stock(model_path):
    from lm_eval.models.huggingface import HFLM

    from belief_tasks.backends.shared import HFSharedPrefixLM

    args = dict(pretrained=str(model_path), device="cpu", dtype="float32", batch_size=4, max_length=24)
    statement = "The capital of Spain is Madrid and the capital of France is Paris"
    reqs = instances(
        "loglikelihood",
        [(EXAMPLES + "\nSpain", f" {c}") for c in ["Madrid", "United Kingdom"]]
        + [("", statement), (EXAMPLES, " " + statement)],
    )  # contexts beyond the 24-token window
    want = HFLM(**args).loglikelihood(reqs, disable_tqdm=True)
    shared = HFSharedPrefixLM(**args)
    assert_same_ll(shared.loglikelihood(reqs, disable_tqdm=True), want)
    per_token = shared.per_token_loglikelihood(reqs, disable_tqdm=True)
    assert [len(t) for t in per_token] == [len(encode_request(shared, *r.args)[1]) for r in reqs]
    assert len(per_token[3]) > 10


def tiny_model(kind: str, tokenizer):
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    torch.manual_seed(0)
    common = dict(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.eos_token_id,
    )
    if kind == "llama":
        cfg = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=256,
            **common,
        )
    else:
        cfg = GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256, **common)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_model_without_bos(model_path, kind):
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoTokenizer

    from belief_tasks.backends.shared import HFSharedPrefixLM

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    tokenizer.bos_token = None
    model = tiny_model(kind, tokenizer)
    stock = HFLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=4)
    shared = HFSharedPrefixLM(pretrained=model, tokenizer=tokenizer, device="cpu", batch_size=4)
    assert shared.shared_unsupported is None
    assert shared.prefix_token_id == tokenizer.eos_token_id  # empty contexts are conditioned on EOS
    reqs = instances("loglikelihood", LL_REQUESTS)
    assert_same_ll(shared.loglikelihood(reqs, disable_tqdm=True), stock.loglikelihood(reqs, disable_tqdm=True))
    gen = instances("generate_until", [(p, GEN) for p in PROMPTS], repeats=2)
    assert shared.generate_until(gen + gen, disable_tqdm=True) == stock.generate_until(gen + gen, disable_tqdm=True)


@pytest.mark.e2e
def test_use_cache_serves_all_request_types(shared, stock_ll, tmp_path):
    from lm_eval.api.model import CachingLM

    shared.batch_size_per_gpu = 8
    cached = CachingLM(shared, str(tmp_path / "cache.db"))
    ll = instances("loglikelihood", LL_REQUESTS[:6])
    pt = instances("per_token_loglikelihood", LL_REQUESTS[:6])
    # BELIEF's sampled requests: each carries its own seed, from a task of ours (lm-eval reads no sample back)
    from lm_eval.api.instance import Instance

    from belief_tasks.hooks import harness

    harness.OUR_TASKS.add("belief_test_shared_cache")
    seeded = [
        Instance(
            "generate_until",
            {},
            (PROMPTS[0], {**GEN, "do_sample": True, "temperature": 1.0, "seed": s}),
            i,
            metadata=("belief_test_shared_cache", i, 1),
        )
        for i, s in enumerate((5, 6))
    ]
    first = (cached.loglikelihood(ll), cached.per_token_loglikelihood(pt), cached.generate_until(seeded))
    calls = shared.stats["forward_calls"]
    second = (cached.loglikelihood(ll), cached.per_token_loglikelihood(pt), cached.generate_until(seeded))
    assert shared.stats["forward_calls"] == calls  # everything came from the cache
    assert second == first
    assert_same_ll(first[0], stock_ll[:6])
    shared.cache_hook.dbdict = None  # detach the module-scoped model from this test's database


@pytest.mark.e2e
def test_results_do_not_depend_on_the_shard(shared):
    """Data parallel: lm-eval gives rank r the docs with index % world_size == r and calls our
    methods on those only; a request's result must not depend on which others share its call."""
    shared.batch_size_per_gpu = 8
    reqs = instances("loglikelihood", LL_REQUESTS)
    whole = shared.loglikelihood(reqs, disable_tqdm=True)
    for rank in range(2):
        part = shared.loglikelihood(reqs[rank::2], disable_tqdm=True)
        assert_same_ll(part, whole[rank::2])
    sampled = {"until": ["\n"], "max_gen_toks": 6, "do_sample": True, "temperature": 1.0}
    gen = instances("generate_until", [(p, sampled) for p in PROMPTS[::2]], repeats=3)
    cloned = [r for r in gen for _ in range(3)]
    assert shared.generate_until(cloned[3:], disable_tqdm=True) == shared.generate_until(cloned, disable_tqdm=True)[3:]


def test_registered_and_dispatchable():
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval.api.registry import get_model

    from belief_tasks.backends.shared import HFSharedPrefixLM

    assert get_model("hf-shared") is HFSharedPrefixLM


def test_effective_stops_drop_only_redundant_strings():
    from belief_tasks.requests import effective_stops

    assert effective_stops(["\n", ".", "\n<belief-sample 3>", "\n"]) == ["\n", "."]
    assert effective_stops(["Q:", "A:", ""]) == ["Q:", "A:", ""]
    # the dropped string never changes the stock cut: the one it contains splits first
    text = "Paris is big.\n<belief-sample 3> more"
    cut = text
    for term in ["\n", "\n<belief-sample 3>"]:
        cut = cut.split(term)[0]
    assert cut == text.split("\n")[0]


@pytest.mark.e2e
def test_belief_samples_share_one_prefill(shared, stock, monkeypatch):
    """BELIEF's greedy request and its K tagged samples share one prefill per prompt, and the rows of both
    prompts decode as one batch (each run of rows on its own prompt's cache)."""
    from belief_tasks.tasks.belief_icl import sampling_kwargs

    greedy = {"until": ["\n"], "max_gen_toks": 6, "do_sample": False}
    args = []
    for p in PROMPTS[:2]:
        args += [(p, greedy)] + [(p, sampling_kwargs(greedy, i)) for i in range(4)]
    prefills, batches = [], []
    prefill, decode = type(shared)._prefill, type(shared)._decode_rows
    monkeypatch.setattr(
        type(shared), "_prefill", lambda self, group: (prefills.append(group.context), prefill(self, group))[1]
    )
    monkeypatch.setattr(
        type(shared),
        "_decode_rows",
        lambda self, parts: (
            batches.append([(g.context, len(rows), g.until) for g, rows in parts]),
            decode(self, parts),
        )[1],
    )
    out = shared.generate_until(instances("generate_until", args), disable_tqdm=True)
    assert prefills == PROMPTS[:2]
    assert [[(c, n) for c, n, _ in b] for b in batches] == [[(p, 5) for p in PROMPTS[:2]]]
    assert all(u[0] == "\n" and not any("belief-sample" in s for s in u) for _, _, u in batches[0])
    want = stock.generate_until(instances("generate_until", [(p, greedy) for p in PROMPTS[:2]]), disable_tqdm=True)
    assert [out[0], out[5]] == want
    assert all("\n" not in o for o in out)
    # each sample is its own draw: decoded alone (a batch of one prompt, one row), it is the same text
    shared.max_decode_rows = 1
    try:
        alone = shared.generate_until(instances("generate_until", args), disable_tqdm=True)
    finally:
        shared.max_decode_rows = 256
    assert alone == out


def test_decode_batches_pack_groups_in_order():
    from belief_tasks.backends.generation_plan import DecodeGroup, Row, decode_batches

    def group(name, n):
        return DecodeGroup(name, ["\n"], 8, [Row((i,), do_sample=True, seed=i) for i in range(n)])

    a, b, c = group("A", 3), group("B", 2), group("C", 5)
    sizes = [[(g.context, len(rows)) for g, rows in batch] for batch in decode_batches([a, b, c], 4)]
    # whole groups where they fit; C (5 rows) in pieces of 4; pieces keep their rows' order
    assert sizes == [[("A", 3)], [("B", 2)], [("C", 4)], [("C", 1)]]
    assert [rows for _, rows in decode_batches([c], 4)[1]] == [c.rows[4:]]
    together = decode_batches([a, b, c], 256)
    assert [[(g.context, len(r)) for g, r in bt] for bt in together] == [[("A", 3), ("B", 2), ("C", 5)]]
