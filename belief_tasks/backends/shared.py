"""``hf-shared``: lm-eval's ``hf`` backend that encodes each shared prefix once.

* ``loglikelihood`` (and ``per_token_loglikelihood``): the requests' token sequences
  (after stock tokenisation and left truncation) form a radix tree
  (:mod:`belief_tasks.backends.prefix_tree`). Every tree node's segment is encoded once
  on its parent's cached keys/values; the rest of each request is scored on the node's
  cache, which is broadcast to the rows reading it
  (:mod:`belief_tasks.backends.shared_attention`), never copied per row. A batch takes
  rows of one length from many nodes (BEAR: the answers of many facts in one forward),
  so forwards are long and barely padded.
* ``generate_until``: requests with the same prompt (greedy + samples, ``repeats``)
  are prefilled once, and the rows of several prompts are decoded as one batch, each on
  its prompt's cache (the grouping: :mod:`belief_tasks.backends.generation_plan`). A
  decoding step stays on the device but for one read of the batch's next tokens. Sampling
  draws from a per-sample generator seeded by the request's own ``seed`` kwarg if it
  has one, else by (``sample_seed``, task, doc, request, sample index): the same
  command gives the same samples, in any shard.
  Greedy requests whose prompt has no samples go through stock batched generation.
* ``per_token_loglikelihood``: ``(context, continuation) -> [log p(token)]``, one
  float per continuation token, tokenised as ``loglikelihood``.

Models whose attention we cannot route (sliding windows, soft-capping, no
AttentionInterface, seq2seq) fall back to the stock methods.
"""

from __future__ import annotations

import bisect
import inspect
import itertools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
import torch.nn.functional as F
from lm_eval.models.huggingface import HFLM
from tqdm import tqdm

from belief_tasks.backends.generation_plan import DecodeGroup, Row, SamplingDefaults, decode_batches, plan_generation
from belief_tasks.backends.prefix_tree import CPU_FORWARD_TOKENS, PrefixNode, build_prefix_tree, rounds
from belief_tasks.backends.shared_attention import RowPrefixes, SharedPrefix, shared_prefix_mode
from belief_tasks.facts.seeding import DEFAULT_SEED
from belief_tasks.hooks.harness import read_through, seeded_sample_of_ours
from belief_tasks.hooks.lm_eval_api import normalize_gen_kwargs, postprocess_generated_text, thinking
from belief_tasks.requests import PER_TOKEN_LOGLIKELIHOOD, encode_requests

log = logging.getLogger(__name__)

MIN_FORWARD_TOKENS = 8
#: a batch carries at most max(PAD_BUDGET, its tokens / PAD_SHARE) tokens of padding: one more
#: forward costs about as much as 30 tokens on CPU (it reads every weight once)
PAD_BUDGET = 32
PAD_SHARE = 16
#: ``min_shared_tokens="auto"``: what one more forward is worth in tokens. On a CPU a forward's fixed cost is a
#: few tokens' work (docs/benchmarks.md, "Work per request": ~4 ms outside forwards, ~3 ms per token for the
#: bundled model). On an accelerator a small model's forward is bound by its fixed cost (kernel launches, host
#: work): on the H200, stock hf's BEAR forwards at the 135M shape took ~40 ms each for ~6 ms of arithmetic
#: (docs/benchmarks.md, "On a GPU"), thousands of tokens' worth; 1,024 at 135 M parameters is a conservative
#: reading of that one measurement, scaled down with the parameters (a token's arithmetic grows with them, the
#: fixed cost does not). Not tuned on a device: the knob is there to set it.
SHARED_TOKENS_ACCELERATOR = 1024
ACCELERATOR_REFERENCE_PARAMS = 135e6
#: float32 logits one forward may return on a CPU (rows x the positions some row reads x the vocabulary): a batch's
#: rows are cut to stay within it (the bundled model: 1,365 positions). A batch of ``max_batch_tokens`` one-token
#: rows returned 4,096 positions before: 805 MB, and as much again for their log-softmax.
LOGITS_BYTES = 1 << 28
LOGPROB_CHUNK = 128  # positions per log-softmax: its output is as large as the logits it reads


def unsupported_reason(model, backend: str) -> str | None:
    """Why shared-prefix attention cannot run on ``model`` (None when it can)."""
    if backend != "causal":
        return f"backend {backend!r} is not causal"
    if not getattr(type(model), "_can_set_attn_implementation", lambda: False)():
        return f"{type(model).__name__} does not route attention through transformers' AttentionInterface"
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True):
        return "config.sliding_window is set"
    for attr in ("attn_logit_softcapping", "final_logit_softcapping"):
        if getattr(cfg, attr, None):
            return f"config.{attr} is set"
    if getattr(cfg, "layer_types", None) and any(t != "full_attention" for t in cfg.layer_types):
        return "not every layer is full attention"
    import transformers

    if getattr(cfg, "model_type", "") == "gpt2" and int(transformers.__version__.split(".")[0]) < 5:
        # measured: 0.16 nats off stock hf on transformers 4.57.1, exact on 5.24 (docs/backends.md)
        return "GPT-2 shares prefixes exactly only on transformers 5 (docs/backends.md, transformers versions)"
    return None


@dataclass
class _Request:
    """One scoring request in token space: ``seq`` is the (truncated) context+continuation."""

    seq: list[int]
    n_cont: int

    @property
    def inputs(self) -> list[int]:  # what the model reads: position t predicts seq[t + 1]
        return self.seq[:-1]

    @property
    def first_scored(self) -> int:
        return len(self.seq) - 1 - self.n_cont


_Found = tuple[list[float], list[bool]]  # a request's continuation: log-probabilities, is-argmax flags


@dataclass
class _Scores:
    """What one batch row leaves for the requests below it, computed once.

    Positions ``[kept_from, kept_from + len(logp))`` have a known next token: their
    log-probability and is-argmax flag. A tree node's last position ``end - 1`` is followed
    by different tokens in the requests below it: ``last`` maps each of them to its pair."""

    kept_from: int
    end: int
    logp: list[float]
    greedy: list[bool]
    last: dict[int, tuple[float, bool]] | None = None


@dataclass(eq=False)  # compared by identity
class _Parent:
    """A tree node whose cache is ready; its items wait in the pool."""

    node: PrefixNode
    prefix: SharedPrefix
    path: list[_Scores]  # scores of the segments from the root to this node
    serial: int  # creation order: rows of one parent are kept contiguous in a batch


@dataclass(eq=False)  # compared by identity
class _Item:
    """One row to forward on ``parent``'s cache: a child segment (its cache is kept) or a leaf
    request's remaining tokens (scored, then dropped)."""

    tokens: list[int]
    parent: _Parent
    target: PrefixNode | int
    need: int  # first column (relative to the row) some request reads
    after: list[int]  # what follows the row: a leaf's final token; the distinct next tokens below a segment

    @property
    def is_node(self) -> bool:
        return isinstance(self.target, PrefixNode)


@dataclass
class _Pool:
    """Items waiting to be forwarded.

    Child segments go first (each unlocks the rows below it); then the leaf rows of every waiting node are
    forwarded together, widest first, so a batch holds rows of one length from many nodes (BEAR: the answers of
    many facts): long forwards, next to no padding. A batch of segments with room left takes waiting leaf rows no
    wider than its own rows: they add no width, and a forward's fixed cost (its kernel launches, on an accelerator
    the larger part of a small model's forward) is paid once for both. A batch's logits, its rows times the
    columns some row reads, stay within ``logit_positions`` (one row whatever its width). The caches the nodes
    hold are bounded by the round the pool serves (``prefix_tree.rounds``), not here."""

    pad_budget: int  # padding a batch may carry whatever its size (PAD_BUDGET or min_shared_tokens)
    logit_positions: int
    nodes: list[_Item] = field(default_factory=list)
    leaves: list[_Item] = field(default_factory=list)
    unsorted: bool = False

    def add(self, items: list[_Item]) -> None:
        for item in items:
            (self.nodes if item.is_node else self.leaves).append(item)
        self.unsorted = self.unsorted or bool(items)

    def take(self, rows_for_width) -> list[_Item]:
        """The next batch, widest rows first: at most ``rows_for_width(width)`` rows,
        ``max(pad_budget, tokens / PAD_SHARE)`` tokens of padding and ``logit_positions`` logits."""
        if self.unsorted:  # stable: equal lengths keep their order
            self.nodes.sort(key=lambda it: len(it.tokens))
            self.leaves.sort(key=lambda it: len(it.tokens))
            self.unsorted = False
        items = self.nodes or self.leaves
        width = len(items[-1].tokens)
        limit = rows_for_width(width)
        batch, padding, need = self._widest(items, len(items), width, limit, (0, width))
        if items is self.nodes and len(batch) < limit and self.leaves:
            fits = bisect.bisect_right(self.leaves, width, key=lambda it: len(it.tokens))
            riders, _, _ = self._widest(self.leaves, fits, width, limit - len(batch), (padding, need), len(batch))
            batch += riders
        batch.sort(key=lambda it: it.parent.serial)  # stable: rows of one parent are contiguous
        return batch

    def _widest(self, items: list[_Item], stop: int, width: int, limit: int, held: tuple[int, int], rows: int = 0):
        """Removes and returns the widest of ``items[:stop]`` (sorted by length) that a batch of ``width`` holding
        ``rows`` rows, whose padding and first column read are ``held``, can take, and the batch's padding and
        first column read after them. The last rows of ``items[:stop]`` come along whatever the padding so far
        when theirs is under ``pad_budget``."""
        padding, need = held
        n, room = 0, min(stop, limit)
        while n < room:
            item = items[stop - 1 - n]
            extra, low = width - len(item.tokens), min(need, item.need)
            if padding + extra > max(self.pad_budget, (rows + n + 1) * width // PAD_SHARE):
                break
            if rows + n and (rows + n + 1) * max(1, width - low) > self.logit_positions:
                break
            n, padding, need = n + 1, padding + extra, low
        left = stop - n  # rows that would need a forward of their own join when their padding is worth less
        if 0 < left <= room - n:
            tail = sum(width - len(it.tokens) for it in items[:left])
            low = min([need] + [it.need for it in items[:left]])
            if tail <= self.pad_budget and (rows + stop) * max(1, width - low) <= self.logit_positions:
                n, padding, need = stop, padding + tail, low
        taken = items[stop - n : stop]
        del items[stop - n : stop]
        return taken, padding, need

    def __bool__(self) -> bool:
        return bool(self.nodes or self.leaves)


def _row_prefixes(batch: list[_Item]) -> SharedPrefix | RowPrefixes:
    """The batch's prefixes: one for all rows (broadcast), or one per run of rows."""
    parents = [batch[0].parent]
    bounds = [0]
    for b, item in enumerate(batch):
        if item.parent is not parents[-1]:
            parents.append(item.parent)
            bounds.append(b)
    if len(parents) == 1:
        return parents[0].prefix
    return RowPrefixes([p.prefix for p in parents], bounds + [len(batch)])


def _rows_prefix(prefixes: list[SharedPrefix], part_of_row: list[int]) -> SharedPrefix | RowPrefixes:
    """The prefixes of a decoding batch whose rows (in order) read ``prefixes[part_of_row[b]]``."""
    runs = [k for k, _ in itertools.groupby(part_of_row)]
    if len(runs) == 1:
        return prefixes[runs[0]]
    bounds = [0]
    for _, rows in itertools.groupby(part_of_row):
        bounds.append(bounds[-1] + len(list(rows)))
    return RowPrefixes([prefixes[k] for k in runs], bounds, reused=True)


def _gather(req: _Request, parts: list[_Scores]) -> tuple[list[float], list[bool]]:
    """The request's scored positions, read from the segments on its path (root first)."""
    first, stop = req.first_scored, len(req.seq) - 1
    logp, greedy = [0.0] * req.n_cont, [False] * req.n_cont
    for part in parts:
        lo, hi = max(part.kept_from, first), min(part.kept_from + len(part.logp), stop)
        if lo < hi:
            logp[lo - first : hi - first] = part.logp[lo - part.kept_from : hi - part.kept_from]
            greedy[lo - first : hi - first] = part.greedy[lo - part.kept_from : hi - part.kept_from]
        if part.last is not None and first <= part.end - 1 < stop:  # the token after the segment, in this request
            logp[part.end - 1 - first], greedy[part.end - 1 - first] = part.last[req.seq[part.end]]
    return logp, greedy


def _loglikelihood(logp: list[float], greedy: list[bool]) -> tuple[float, bool]:
    """A ``loglikelihood`` answer: the continuation's log-probabilities summed as float32, as stock sums them."""
    return float(torch.tensor(logp, dtype=torch.float32).sum()), all(greedy)


def _per_token(logp: list[float], greedy: list[bool]) -> list[float]:
    """A ``per_token_loglikelihood`` answer: the continuation's log-probabilities as float32 values."""
    return torch.tensor(logp, dtype=torch.float32).tolist()


class HFSharedPrefixLM(HFLM):
    """HFLM (same model arguments) plus ``sample_seed`` (int, default 1234),
    ``max_batch_tokens`` (token budget of one forward when batch_size is "auto", default 4096),
    ``min_shared_tokens`` (what one more forward is worth in tokens: a prefix split must save this many, a
    level of the prefix tree must save this many over repeating its segment, a batch takes this much padding
    rather than one more forward; default "auto": 8 on CPU, 1024 on an accelerator),
    ``max_cached_tokens`` (prefix positions cached before their rows are scored, default 32768)
    and ``max_decode_rows`` (rows decoded together, of one or several prompts, default 256)."""

    def __init__(
        self,
        pretrained: Any,
        sample_seed: int = DEFAULT_SEED,
        max_batch_tokens: int = 4096,
        min_shared_tokens: int | str = "auto",
        max_cached_tokens: int = 32768,
        max_decode_rows: int = 256,
        **kwargs: Any,
    ) -> None:
        super().__init__(pretrained, **kwargs)
        self.sample_seed = int(sample_seed)
        self.max_batch_tokens = int(max_batch_tokens)
        self.min_shared_tokens = self._forward_worth() if min_shared_tokens == "auto" else int(min_shared_tokens)
        self.max_cached_tokens = int(max_cached_tokens)
        self.max_decode_rows = int(max_decode_rows)
        self.shared_unsupported = unsupported_reason(self.model, self.backend)
        if self.shared_unsupported:
            log.warning("hf-shared: prefix sharing is off (%s); using stock hf methods", self.shared_unsupported)
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        #: the KV cache's name in this transformers: ``cache`` (current; ``past_key_values`` is deprecated and
        #: warns) or ``past_key_values`` (before the rename), as the model's forward names it
        self._cache_name = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
        #: the requests of the stock generation call under way (``_detect_batch_size`` sizes "auto" by them)
        self._stock_generation: list | None = None
        #: work counters, reset by the caller (the benchmark reads them)
        self.stats = {"tokens_forwarded": 0, "forward_calls": 0}

    def _forward_worth(self) -> int:
        """``min_shared_tokens="auto"`` (see SHARED_TOKENS_ACCELERATOR)."""
        if self.device.type == "cpu":
            return CPU_FORWARD_TOKENS
        params = sum(p.numel() for p in self.model.parameters())
        return max(CPU_FORWARD_TOKENS, round(SHARED_TOKENS_ACCELERATOR * ACCELERATOR_REFERENCE_PARAMS / params))

    # ------------------------------------------------------------ data parallel on CPU

    def _cpu_launch(self):
        """The accelerator of a multi-process launch on CPU (``accelerate launch``), else None. lm-eval
        0.4.13's HFLM keeps it but takes rank and world size from it only when it counts CUDA devices, so
        on CPU every process would run the whole task; ``hf-shared`` shards as HFLM does on GPUs."""
        acc = self.__dict__.get("accelerator")
        if acc is None or self._world_size != 1 or acc.num_processes <= 1 or acc.device.type != "cpu":
            return None
        return acc

    @property
    def rank(self) -> int:
        acc = self._cpu_launch()
        return acc.process_index if acc is not None else self._rank

    @property
    def world_size(self) -> int:
        acc = self._cpu_launch()
        return acc.num_processes if acc is not None else self._world_size

    # ------------------------------------------------------------------ scoring

    def _rows_per_batch(self, length: int, override_bs: int | None) -> int:
        if override_bs is not None:
            return max(1, int(override_bs))
        if self.batch_size == "auto" or not isinstance(self.batch_size, int):
            return max(1, self.max_batch_tokens // max(1, length))
        return max(1, self.batch_size)

    def _detect_batch_size(self, requests=None, pos: int = 0) -> int:
        """``batch_size="auto"`` on the stock paths (greedy prompts without samples, unsupported models).

        lm-eval forwards ``max_batch_size`` rows of the longest request five times and halves on CUDA's
        out-of-memory error; for generation it takes ``max_length`` as that length (8,192 for the bundled
        model), whatever the prompts. On a GPU that probe took about a minute per call (measured on an H200,
        docs/benchmarks.md, "On a GPU"), so for a generation call we hand lm-eval's probe the call's own
        length: its longest prompt plus its new tokens. A CPU raises no out-of-memory error: it allocates
        (64 rows x 8,192 positions of 49,152 logits is ~100 GB) until the machine swaps. Off CUDA, "auto"
        is therefore our token budget, as on the shared paths: ``max_batch_tokens // length`` rows."""
        cuda = self.device.type == "cuda"
        if requests:
            if cuda:
                return super()._detect_batch_size(requests, pos)
            _, context_enc, continuation_enc = requests[pos]
            length = len((context_enc + continuation_enc)[-(self.max_length + 1) :][:-1])
        elif self._stock_generation:  # tokenised only here: a fixed batch size never needs it
            stock = self._stock_generation
            prompt = max(len(self.tok_encode(r.args[0])) for r in stock)
            new = max(normalize_gen_kwargs(dict(r.args[1]), self.max_gen_toks)["max_gen_toks"] for r in stock)
            if cuda:  # lm-eval's probe, at the length this call needs (token ids do not matter to it)
                return super()._detect_batch_size([(None, [0] * prompt, [0] * new)])
            length = prompt + new
        elif cuda:
            return super()._detect_batch_size(requests, pos)
        else:
            length = self.max_length
        return min(self.max_batch_size, self._rows_per_batch(length, None))

    def _call(
        self,
        input_ids: torch.Tensor,
        prefix: SharedPrefix | RowPrefixes,
        *,
        keep: int = 0,
        past=None,
        use_cache: bool = False,
    ):
        """One forward of ``input_ids`` (right-padded rows) on ``prefix`` (+ a decoding cache ``past``)."""
        self.stats["tokens_forwarded"] += int(input_ids.numel())
        self.stats["forward_calls"] += 1
        kwargs: dict[str, Any] = {"use_cache": use_cache}
        if keep and self._keeps_logits:  # the lm head only on the positions we read
            kwargs["logits_to_keep"] = keep
        own = past.get_seq_length() if past is not None else 0  # the rows' own cached positions (decoding)
        starts: torch.Tensor | int
        if isinstance(prefix, RowPrefixes):
            plain = not prefix.runs() and past is None
            starts = torch.tensor(prefix.offsets(), device=input_ids.device)[:, None] + own
        else:
            plain = prefix.length == 0 and past is None
            starts = prefix.length + own
        with (
            torch.no_grad(),
            torch.autocast(
                device_type=self.device.type,
                dtype=self.mixed_precision_dtype,
                enabled=self.mixed_precision_dtype is not None,
            ),
        ):
            if plain:  # nothing shared: a plain causal forward
                return self.model(input_ids, **kwargs)
            positions = starts + torch.arange(input_ids.shape[1], device=input_ids.device)
            with shared_prefix_mode(self.model):
                return self.model(
                    input_ids,
                    position_ids=positions.expand(input_ids.shape[0], -1),
                    shared_prefix=prefix,
                    **{self._cache_name: past},
                    **kwargs,
                )

    def _score(self, reqs: list[_Request], override_bs: int | None, found: Callable[[int, _Found], None]) -> None:
        """Calls ``found(i, (log-probabilities, is-argmax flags))`` with request ``i``'s continuation tokens as
        soon as they are known.

        The requests' radix tree is computed top down: a node's segment is forwarded on its
        parent's cache, then its children and leaves join the pool, whose batches mix the
        rows of many nodes (:class:`_Pool`)."""
        min_saving = math.inf if self.shared_unsupported else self.min_shared_tokens
        root = build_prefix_tree([r.inputs for r in reqs], min_saving=min_saving)
        first = {id(n): min((reqs[i].first_scored for i in n.sequences()), default=n.end) for n in root.walk()}
        after = {
            id(n): sorted({c.tokens[0] for c in n.children} | {reqs[i].seq[n.end] for i in n.leaves})
            for n in root.walk()
        }
        pool, serial = _Pool(max(PAD_BUDGET, self.min_shared_tokens), self._logit_positions()), itertools.count()

        def expand(parent: _Parent) -> None:
            node = parent.node
            items = [_Item(c.tokens, parent, c, max(0, first[id(c)] - node.end), after[id(c)]) for c in node.children]
            for i in node.leaves:
                rest = reqs[i].inputs[node.end :]
                if rest:
                    items.append(_Item(rest, parent, i, max(0, reqs[i].first_scored - node.end), [reqs[i].seq[-1]]))
                else:  # the request ends where this node ends: all its positions are in the path
                    found(i, _gather(reqs[i], parent.path))
            pool.add(items)

        expand(_Parent(root, SharedPrefix.empty(), [], next(serial)))
        while pool:
            batch = pool.take(lambda width: self._rows_per_batch(width, override_bs))
            for item, scores, prefix in self._forward_items(batch):
                path = item.parent.path + [scores]
                if isinstance(item.target, PrefixNode):
                    expand(_Parent(item.target, prefix, path, next(serial)))
                else:
                    found(item.target, _gather(reqs[item.target], path))

    def _logit_positions(self) -> int:
        """Positions whose logits one forward may return. On a CPU, where memory is the machine's,
        ``LOGITS_BYTES`` of float32 logits; on an accelerator the token budget, as before (untested there)."""
        if self.device.type != "cpu":
            return max(1, self.max_batch_tokens)
        return max(1, LOGITS_BYTES // (4 * self._vocab_size))

    def _forward_items(self, batch: list[_Item]):
        """Forward one batch; per item its :class:`_Scores` and, for a tree node, its prefix: its own segment's
        keys and values, after its parent's."""
        width = max(len(it.tokens) for it in batch)
        keep = max(1, width - min(it.need for it in batch))  # columns width-keep .. width-1 are read
        # A forward of a single row and token takes the matrix-vector path, whose rounding differs
        # enough to shift later positions (all of them attend to a BOS computed that way) by ~1e-4 nats;
        # pad such tiny batches to a few positions (causal: the padding changes nothing else).
        pad_to = max(width, -(-MIN_FORWARD_TOKENS // len(batch)))
        pad = self.eot_token_id or 0
        ids = torch.tensor([it.tokens + [pad] * (pad_to - len(it.tokens)) for it in batch], dtype=torch.long)
        has_nodes = any(it.is_node for it in batch)
        result = self._call(ids.to(self.device), _row_prefixes(batch), keep=keep + pad_to - width, use_cache=has_nodes)
        off = pad_to - result.logits.shape[1]  # the returned logits start at position `off`
        scores = self._row_scores(result.logits[:, width - keep - off : width - off], batch, width - keep)
        for b, (item, sc) in enumerate(zip(batch, scores, strict=True)):
            prefix = None
            if item.is_node:  # its own positions, read after its parent's (never copied with them)
                own = SharedPrefix.from_cache(result[self._cache_name], row=b, length=len(item.tokens))
                prefix = own.after(item.parent.prefix)
            yield item, sc, prefix

    def _row_scores(self, logits: torch.Tensor, batch: list[_Item], first_col: int) -> list[_Scores]:
        """Each row's :class:`_Scores` from ``logits [B, keep, V]`` (columns ``first_col ..``),
        log-softmaxed as stock does, a chunk of rows at a time."""
        keep = logits.shape[1]
        targets, n_known = [], []
        for it in batch:
            nxt = it.tokens[first_col + 1 :] + ([] if it.is_node else it.after)
            n_known.append(len(nxt))
            targets.append(nxt + [0] * (keep - len(nxt)))
        tgt = torch.tensor(targets, dtype=torch.long, device=logits.device)[..., None]
        # read to the host once per batch (a device waits for every read): the targets' log-probabilities and
        # is-argmax flags, and for each node row the log-probabilities of the tokens after its last position
        # and that position's argmax, packed in one float64 tensor (exact for float32 values and token ids)
        logp, is_max, last_values, last_tops, last_rows = [], [], [], [], []
        step = max(1, LOGPROB_CHUNK // keep)
        for lo in range(0, len(batch), step):
            lp = F.log_softmax(logits[lo : lo + step], dim=-1, dtype=self.softmax_dtype)
            argmax = lp.argmax(dim=-1)
            logp.append(lp.gather(-1, tgt[lo : lo + step])[..., 0])
            is_max.append(argmax == tgt[lo : lo + step, :, 0])
            for b in range(lo, min(lo + step, len(batch))):
                n_kept = len(batch[b].tokens) - first_col
                if batch[b].is_node and n_kept > 0:
                    last_values.append(lp[b - lo, n_kept - 1, batch[b].after])
                    last_tops.append(argmax[b - lo, n_kept - 1 : n_kept])
                    last_rows.append(b)
        n_cells = len(batch) * keep
        read = torch.cat([t.reshape(-1).double() for t in logp + is_max + last_values + last_tops]).tolist()
        logp_rows = [read[b * keep : (b + 1) * keep] for b in range(len(batch))]
        max_rows = [[x == 1.0 for x in read[n_cells + b * keep : n_cells + (b + 1) * keep]] for b in range(len(batch))]
        lasts, at = {}, 2 * n_cells
        tops = read[len(read) - len(last_rows) :]
        for b, top in zip(last_rows, tops, strict=True):
            after = batch[b].after
            values = read[at : at + len(after)]
            at += len(after)
            lasts[b] = {t: (v, t == top) for t, v in zip(after, values, strict=True)}
        out = []
        for b, it in enumerate(batch):
            start = it.parent.node.end
            n = max(0, n_known[b])
            kept_from = start + min(first_col, len(it.tokens))
            out.append(_Scores(kept_from, start + len(it.tokens), logp_rows[b][:n], max_rows[b][:n], lasts.get(b)))
        return out

    def _token_requests(self, pairs: Iterable[tuple[list[int], list[int]]]) -> tuple[list[_Request], int]:
        """The requests as stock HFLM forwards them (context + continuation cut from the left to ``max_length``
        + 1 tokens), and how many were cut."""
        reqs, truncated = [], 0
        for context_enc, continuation_enc in pairs:
            assert len(context_enc) > 0 and len(continuation_enc) > 0
            assert len(continuation_enc) <= self.max_length
            whole = context_enc + continuation_enc
            truncated += len(whole) > self.max_length + 1
            reqs.append(_Request(whole[-(self.max_length + 1) :], len(continuation_enc)))
        return reqs, truncated

    def _score_rounds(self, requests: Iterable[tuple[int, list[int], list[int]]], n: int, finish, **kw) -> list:
        """``(index, context tokens, continuation tokens)`` scored in rounds of at most ``max_cached_tokens``
        positions (``prefix_tree.rounds``: each round tokenised, planned and scored before the next, so memory
        follows the knob, not the requests): per index ``finish(log-probabilities, is-argmax flags)``, handed to
        ``done(index, result)`` as soon as it is known (so it reaches lm-eval's cache then, not at the end).
        Keywords: ``desc`` (the progress bar's), ``override_bs``, ``done``."""
        out: list[Any] = [None] * n
        done = kw.get("done")
        pbar = tqdm(total=n, disable=self.rank != 0 or not kw.get("desc"), desc=kw.get("desc"))
        truncated = 0
        for part in rounds(requests, self.max_cached_tokens):
            reqs, cut = self._token_requests((ctx, cont) for _, ctx, cont in part)
            truncated += cut

            def found(j: int, scores: _Found, part=part) -> None:
                i = part[j][0]
                out[i] = finish(*scores)
                if done is not None:
                    done(i, out[i])
                pbar.update(1)

            self._score(reqs, kw.get("override_bs"), found)
        pbar.close()
        if truncated:
            log.warning(
                "hf-shared: %d requests longer than max_length %d were truncated from the left",
                truncated,
                self.max_length,
            )
        return out

    def _score_strings(self, args: list[tuple[str, str]], finish, **kw) -> list:
        """``_score_rounds`` of (context, continuation) strings, tokenised as lm-eval does (``encode_requests``) round
        by round, in the order of their contexts: each context is tokenised once and its requests share a round."""
        order = sorted(range(len(args)), key=lambda i: args[i][0])
        encoded = encode_requests(self, (args[i] for i in order))
        return self._score_rounds(((i, *pair) for i, pair in zip(order, encoded)), len(args), finish, **kw)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """lm-eval's ``TemplateLM.loglikelihood`` (the same tokens: ``requests.encode_request``), scored in rounds
        rather than tokenised all at once: lm-eval holds every request's context tokens until the last is scored
        (IC-LKE: a 50-example context once per option). ``enable_thinking`` goes to HFLM's (0.4.13's refuses it)."""
        if self.shared_unsupported or thinking(self):
            return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

        def keep(i, answer):  # each answer in lm-eval's cache once it exists: a run killed mid-call resumes there
            self.cache_hook.add_partial("loglikelihood", requests[i].args, answer)

        desc = "" if disable_tqdm else "Running loglikelihood requests (shared)"
        return self._score_strings([r.args for r in requests], _loglikelihood, desc=desc, done=keep)

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        """Requests tokenised by the caller (lm-eval's ``loglikelihood_rolling``), in their order."""
        if self.shared_unsupported:
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)

        def keep(i, answer):
            if requests[i][0] is not None:
                self.cache_hook.add_partial("loglikelihood", requests[i][0], answer)

        desc = "" if disable_tqdm else "Running loglikelihood requests (shared)"
        indexed = ((i, ctx, cont) for i, (_, ctx, cont) in enumerate(requests))
        return self._score_rounds(indexed, len(requests), _loglikelihood, desc=desc, override_bs=override_bs, done=keep)

    def per_token_loglikelihood(self, requests, disable_tqdm: bool = False) -> list[list[float]]:
        """``Instance.args = (context, continuation)`` -> one log-probability per continuation token.

        lm-eval's ``CachingLM`` reads its ``--use_cache`` database only for its own request types and
        passes this one through, so the method reads the database itself (``harness.read_through``,
        through the cache hook lm-eval hands the model); ``add_partial`` lands each answer in it as
        soon as it exists, so a run killed mid-call resumes from there."""
        if self.backend != "causal":
            raise NotImplementedError("per_token_loglikelihood needs a causal model")
        return read_through(
            self, PER_TOKEN_LOGLIKELIHOOD, requests, lambda rest: self._per_token_loglikelihood(rest, disable_tqdm)
        )

    def _per_token_loglikelihood(self, requests, disable_tqdm: bool) -> list[list[float]]:
        def keep(i, answer):  # as loglikelihood: each answer in the cache once it exists
            self.cache_hook.add_partial(PER_TOKEN_LOGLIKELIHOOD, requests[i].args, answer)

        desc = "" if disable_tqdm else "Running per_token_loglikelihood requests"
        return self._score_strings([r.args for r in requests], _per_token, desc=desc, done=keep)

    # --------------------------------------------------------------- generation

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Texts of ``requests``; under ``--use_cache`` the seeded samples of our tasks are read back
        (``harness.read_through``: lm-eval's ``CachingLM`` never reads a sample, but a sample with its own
        seed is deterministic), the rest as lm-eval's cache left them to us."""
        return read_through(
            self,
            "generate_until",
            requests,
            lambda rest: self._generate_until(rest, disable_tqdm),
            readable=seeded_sample_of_ours,
        )

    def _generate_until(self, requests, disable_tqdm: bool) -> list[str]:
        if self.shared_unsupported or self.think_end_token is not None:
            return super().generate_until(requests, disable_tqdm=disable_tqdm)
        config = self.model.generation_config
        plan = plan_generation(
            requests,
            eos=self.tok_decode(self.eot_token_id, skip_special_tokens=False),
            max_gen_toks=self.max_gen_toks,
            sample_seed=self.sample_seed,
            defaults=SamplingDefaults(top_k=config.top_k if config.top_k is not None else 50, top_p=config.top_p),
        )
        results: list[str | None] = [None] * len(requests)
        if plan.stock:  # stock generation, one request per distinct (context, kwargs)
            self._stock_generation = [requests[idx[0]] for idx in plan.stock]
            try:
                texts = super().generate_until(self._stock_generation, disable_tqdm=disable_tqdm)
            finally:
                self._stock_generation = None
            for idx, text in zip(plan.stock, texts, strict=True):
                for i in idx:
                    results[i] = text
        pbar = tqdm(
            total=sum(len(r.requests) for g in plan.groups for r in g.rows),
            disable=disable_tqdm or self.rank != 0,
            desc="Running generate_until requests (shared prompt)",
        )
        for parts in decode_batches(plan.groups, self.max_decode_rows):
            decoded = iter(self._decode_rows(parts))
            for group, rows in parts:
                for row in rows:
                    text = postprocess_generated_text(self.tok_decode(next(decoded)), group.until, None)
                    for i in row.requests:
                        results[i] = text
                        self.cache_hook.add_partial("generate_until", requests[i].args, text)
                    pbar.update(len(row.requests))
        pbar.close()
        return results  # type: ignore[return-value]

    def _sampling_blocks(self, rows: list[Row]) -> list[tuple[tuple, torch.Tensor]]:
        """The sampled rows by their settings (temperature, top-k, top-p, min-p): per block, its rows' indices
        on the device."""
        blocks: dict[tuple, list[int]] = {}
        for b, row in enumerate(rows):
            if row.do_sample:
                blocks.setdefault((row.temperature, row.top_k, row.top_p, row.min_p), []).append(b)
        return [(settings, torch.tensor(idx, device=self.device)) for settings, idx in blocks.items()]

    def _next_tokens(
        self, logits: torch.Tensor, blocks: list[tuple[tuple, torch.Tensor]], uniforms: torch.Tensor
    ) -> torch.Tensor:
        """One token per row, on the device: argmax for greedy rows; for each block of sampled rows sharing
        settings (``_sampling_blocks``) transformers' warpers (temperature, top-k, top-p, min-p, in that order),
        then an inverse-CDF draw at the row's uniform of this step (``uniforms``, one per row)."""
        logits = logits.float()
        chosen = logits.argmax(dim=-1)
        for (temperature, top_k, top_p, min_p), index in blocks:
            scores = logits[index] / temperature
            if top_k is not None and top_k < scores.shape[-1]:
                kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]
                scores = scores.masked_fill(scores < kth, float("-inf"))
            if top_p is not None:  # keep the smallest set whose mass reaches top_p
                sorted_scores, order = torch.sort(scores, dim=-1, descending=False)
                drop = sorted_scores.softmax(-1).cumsum(-1) <= 1 - top_p
                drop[:, -1] = False
                scores = scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))
            probs = scores.softmax(-1)
            if min_p is not None:
                probs = probs.masked_fill(probs < min_p * probs.amax(-1, keepdim=True), 0.0)
            cdf = probs.cumsum(-1)
            drawn = torch.searchsorted(cdf, (uniforms[index] * cdf[:, -1])[:, None]).clamp_(max=cdf.shape[-1] - 1)
            chosen[index] = drawn[:, 0]
        return chosen

    def _prefill(self, group: DecodeGroup) -> tuple[SharedPrefix, torch.Tensor]:
        """The prompt's cache and its last position's logits (batch 1: the prompt's own prefill)."""
        max_ctx_len = self.max_length - group.max_gen
        assert max_ctx_len > 0, (
            f"max_gen_toks ({group.max_gen}) must be below the model's max_length ({self.max_length})"
        )
        context_enc, _ = self.tok_batch_encode(
            [group.context], left_truncate_len=max_ctx_len, truncation=self.truncation
        )
        prefill = self._call(context_enc.to(self.device), SharedPrefix.empty(), keep=1, use_cache=True)
        return SharedPrefix.from_cache(prefill[self._cache_name]), prefill.logits[0, -1]

    def _decode_rows(self, parts: list[tuple[DecodeGroup, list[Row]]]) -> list[list[int]]:
        """Prefill each part's prompt once, then decode the rows of all parts as one batch, each run of rows on its
        own prompt's cache; each row's tokens, in order.

        Every step stays on the device but one read: the batch's next tokens, which the host needs to stop rows
        (EOS, ``max_gen``, a stop string in the row's decoded text). A sampled row draws from uniforms of its own
        generator, drawn for all its steps up front (the same numbers, in the same order, as one draw per step)."""
        prefixes, first, rows, until, max_gen = [], [], [], [], []
        for group, group_rows in parts:
            prompt, logits = self._prefill(group)
            prefixes.append(prompt)
            first.append(logits.expand(len(group_rows), -1))
            rows += group_rows
            until += [group.until] * len(group_rows)
            max_gen += [group.max_gen] * len(group_rows)
        part_of = [k for k, (_, group_rows) in enumerate(parts) for _ in group_rows]
        uniforms = self._row_uniforms(rows, max(max_gen))
        eos_ids = self._eos_ids()
        tokens: list[list[int]] = [[] for _ in rows]
        active = list(range(len(rows)))
        logits = torch.cat(first) if len(first) > 1 else first[0]
        needed, past, step = 0, None, 0
        blocks = self._sampling_blocks(rows)
        prefix: SharedPrefix | RowPrefixes | None = None
        while active:
            chosen = self._next_tokens(logits, blocks, uniforms[:, step])
            still = []
            for j, (a, tok) in enumerate(zip(active, chosen.tolist(), strict=True)):  # the step's one read
                if tok in eos_ids:
                    needed += len(tokens[a])  # every token it generated was fed back
                    continue
                tokens[a].append(tok)
                if len(tokens[a]) >= max_gen[a] or self._stopped(tokens[a], until[a]):
                    needed += len(tokens[a]) - 1  # its last token is never fed back
                    continue
                still.append(j)
            if not still:
                break
            if len(still) < len(active):
                keep = torch.tensor(still, device=self.device)
                chosen, uniforms = chosen.index_select(0, keep), uniforms.index_select(0, keep)
                if past is not None:
                    for layer in past.layers:
                        layer.keys, layer.values = layer.keys.index_select(0, keep), layer.values.index_select(0, keep)
                active = [active[j] for j in still]
                blocks, prefix = self._sampling_blocks([rows[a] for a in active]), None
            if prefix is None:  # built when the rows change (a RowPrefixes keeps its gathered indices and pools)
                prefix = _rows_prefix(prefixes, [part_of[a] for a in active])
            step_out = self._call(chosen[:, None], prefix, past=past, use_cache=True)
            past, logits, step = step_out[self._cache_name], step_out.logits[:, -1], step + 1
        # the floor of the decoding work: tokens each row has to feed back (the prompt is counted by the caller)
        self.stats["generated_tokens"] = self.stats.get("generated_tokens", 0) + needed
        return tokens

    def _row_uniforms(self, rows: list[Row], steps: int) -> torch.Tensor:
        """Each row's uniforms for ``steps`` steps, on the device: a sampled row's from its own seeded generator,
        zeros for a greedy row."""
        return torch.stack(
            [
                torch.rand(steps, generator=torch.Generator().manual_seed(row.seed % (2**63)))
                if row.do_sample
                else torch.zeros(steps)
                for row in rows
            ]
        ).to(self.device)

    def _eos_ids(self) -> set[int]:
        """The token ids that end a row: the generation config's EOS ids, else the tokenizer's end of text."""
        eos_ids = self.model.generation_config.eos_token_id
        return set(eos_ids if isinstance(eos_ids, list) else [eos_ids] if eos_ids is not None else [self.eot_token_id])

    def _stopped(self, tokens: list[int], until: list[str]) -> bool:
        """Whether a stop string occurs in the row's text (decoded once)."""
        text = self.tok_decode(tokens)
        return any(s and s in text for s in until)
