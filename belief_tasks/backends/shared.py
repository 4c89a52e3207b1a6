"""``hf-shared``: lm-eval's ``hf`` backend that encodes each shared prefix once.

* ``loglikelihood`` (and ``per_token_loglikelihood``): the requests' token sequences
  (after stock tokenisation and left truncation) form a radix tree
  (:mod:`belief_tasks.backends.prefix_tree`). Every tree node's segment is encoded once
  on its parent's cached keys/values; the rest of each request is scored in
  right-padded batches on the node's cache, which is broadcast to the batch rows
  (:mod:`belief_tasks.backends.shared_attention`), never copied per row.
* ``generate_until``: requests with the same prompt (greedy + samples, ``repeats``)
  are prefilled once and decoded as one batch on the shared prompt cache. Sampling
  draws from a per-sample generator seeded by the request's own ``seed`` kwarg if it
  has one, else by (``sample_seed``, task, doc, request, sample index): the same
  command gives the same samples, in any batch or shard.
  Greedy requests whose prompt has no samples go through stock batched generation.
* ``per_token_loglikelihood``: ``(context, continuation) -> [log p(token)]``, one
  float per continuation token, tokenised as ``loglikelihood``.

Models whose attention we cannot route (sliding windows, soft-capping, no
AttentionInterface, seq2seq) fall back to the stock methods.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from lm_eval.api.model import hash_args
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm import tqdm

from belief_tasks.backends.prefix_tree import PrefixNode, build_prefix_tree
from belief_tasks.backends.shared_attention import SharedPrefix, shared_prefix_mode
from belief_tasks.seeding import DEFAULT_SEED, derive_seed

log = logging.getLogger(__name__)

#: generation kwargs our decoder implements; any other one sends its requests to stock generation.
SAMPLING_KWARGS = {"do_sample", "temperature", "top_k", "top_p", "min_p"}
MIN_FORWARD_TOKENS = 8
MAX_PAD = 1  # a batch stops before an item needing more padding than max(MAX_PAD, width // 4)


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
    return None


def effective_stops(until: list[str]) -> list[str]:
    """``until`` without the stop strings that contain another one.

    Such a string can never end a generation first, nor cut it differently: wherever it
    occurs, the string it contains occurs at or before it, and stock truncation splits at
    every stop string in turn. Dropping them lets requests that differ only there (BELIEF's
    K samples carry ``<first stop><belief-sample i>`` to stay distinct in the cache) share
    one prefill and one decoding batch."""
    kept: list[str] = []
    for s in until:
        if s in kept or any(o and o != s and o in s for o in until):
            continue
        kept.append(s)
    return kept


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


@dataclass
class _NodeScores:
    """Scores computed once for a segment's kept positions ``[kept_from, end)``.

    Inside the segment the next token is known, so those positions keep only its
    log-probability; the last position's target differs per request below it, so it
    keeps its whole row of logits."""

    kept_from: int
    end: int
    logp: torch.Tensor  # [end - kept_from - 1] log p(next token) at positions kept_from .. end-2
    greedy: torch.Tensor  # [end - kept_from - 1] is that token the argmax
    last_logprobs: torch.Tensor | None  # [vocab] at position end - 1
    last_argmax: int = -1

    @classmethod
    def of_row(cls, logprobs, argmax, toks: list[int], first_col: int, start: int) -> "_NodeScores":
        """From one batch row: ``logprobs[j]`` is column ``first_col + j`` of the row ``toks`` at ``start``."""
        n_kept = len(toks) - first_col
        if n_kept <= 0:  # no position of this row is needed
            return cls(start + len(toks), start + len(toks), logprobs[:0, 0], argmax[:0] == 0, None)
        inner = n_kept - 1
        tgt = torch.tensor(toks[first_col + 1 :], dtype=torch.long, device=logprobs.device)
        logp = logprobs[:inner].gather(-1, tgt[:, None])[:, 0]
        return cls(start + first_col, start + len(toks), logp, argmax[:inner] == tgt,
                   logprobs[inner].clone(), int(argmax[inner]))  # clone: free the batch's log-probs


@dataclass
class _Row:
    """One generation row: a greedy request (shared by its duplicates) or one sample."""

    requests: list[int]  # indices into the generate_until request list
    do_sample: bool
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int = 0
    tokens: list[int] = field(default_factory=list)


class HFSharedPrefixLM(HFLM):
    """HFLM (same model arguments) plus ``sample_seed`` (int, default 1234),
    ``max_batch_tokens`` (token budget of one forward when batch_size is "auto", default 4096),
    ``min_shared_tokens`` (a prefix split must save this many tokens, default 8) and
    ``max_decode_rows`` (samples decoded together, default 256)."""

    def __init__(
        self,
        pretrained: Any,
        sample_seed: int = DEFAULT_SEED,
        max_batch_tokens: int = 4096,
        min_shared_tokens: int = 8,
        max_decode_rows: int = 256,
        **kwargs: Any,
    ) -> None:
        super().__init__(pretrained, **kwargs)
        self.sample_seed = int(sample_seed)
        self.max_batch_tokens = int(max_batch_tokens)
        self.min_shared_tokens = int(min_shared_tokens)
        self.max_decode_rows = int(max_decode_rows)
        self.shared_unsupported = unsupported_reason(self.model, self.backend)
        if self.shared_unsupported:
            log.warning("hf-shared: prefix sharing is off (%s); using stock hf methods", self.shared_unsupported)
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        #: work counters, reset by the caller (the benchmark reads them)
        self.stats = {"tokens_forwarded": 0, "forward_calls": 0}

    # ------------------------------------------------------------------ scoring

    def _rows_per_batch(self, length: int, override_bs: int | None) -> int:
        if override_bs is not None:
            return max(1, int(override_bs))
        if self.batch_size == "auto" or not isinstance(self.batch_size, int):
            return max(1, self.max_batch_tokens // max(1, length))
        return max(1, self.batch_size)

    def _call(self, input_ids: torch.Tensor, prefix: SharedPrefix, *, keep: int = 0, past=None, use_cache: bool = False):
        """One forward of ``input_ids`` (right-padded rows) on ``prefix`` (+ a decoding cache ``past``)."""
        self.stats["tokens_forwarded"] += int(input_ids.numel())
        self.stats["forward_calls"] += 1
        kwargs: dict[str, Any] = {"use_cache": use_cache}
        if keep and self._keeps_logits:  # the lm head only on the positions we read
            kwargs["logits_to_keep"] = keep
        with (
            torch.no_grad(),
            torch.autocast(
                device_type=self.device.type,
                dtype=self.mixed_precision_dtype,
                enabled=self.mixed_precision_dtype is not None,
            ),
        ):
            if prefix.length == 0 and past is None:  # nothing shared: a plain causal forward
                return self.model(input_ids, **kwargs)
            offset = prefix.length + (past.get_seq_length() if past is not None else 0)
            positions = torch.arange(offset, offset + input_ids.shape[1], device=input_ids.device)
            with shared_prefix_mode(self.model):
                return self.model(
                    input_ids,
                    position_ids=positions.expand(input_ids.shape[0], -1),
                    past_key_values=past,
                    shared_prefix=prefix,
                    **kwargs,
                )

    def _score(self, reqs: list[_Request], override_bs: int | None = None, desc: str = "") -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per request: (log-probabilities [n_cont], is-argmax [n_cont]) of its continuation tokens."""
        seqs = [r.inputs for r in reqs]
        min_saving = math.inf if self.shared_unsupported else self.min_shared_tokens
        root = build_prefix_tree(seqs, min_saving=min_saving)
        need_from = {}  # node id -> first position any request below it scores
        for node in root.walk():
            need_from[id(node)] = min((reqs[i].first_scored for i in node.sequences()), default=node.end)
        out: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(reqs)
        pbar = tqdm(total=len(reqs), disable=self.rank != 0 or not desc, desc=desc)
        self._score_node(root, SharedPrefix.empty(), [], reqs, need_from, out, override_bs, pbar)
        pbar.close()
        return out  # type: ignore[return-value]

    def _score_node(self, node: PrefixNode, prefix: SharedPrefix, path: list[_NodeScores], reqs, need_from, out, override_bs, pbar) -> None:
        # Items under this node: child segments (kept as caches) and leaf remainders (scored and dropped).
        items: list[tuple[list[int], PrefixNode | int]] = [(c.tokens, c) for c in node.children]
        for i in node.leaves:
            rest = reqs[i].inputs[node.end :]
            if rest:
                items.append((rest, i))
            else:  # the request ends where this node ends: all its positions are in the path
                out[i] = self._gather(reqs[i], path)
                pbar.update(1)
        items.sort(key=lambda it: -len(it[0]))
        pos = 0
        while pos < len(items):
            width = len(items[pos][0])
            end = min(len(items), pos + self._rows_per_batch(width, override_bs))
            # sorted longest first; stop before an item that would be mostly padding
            cut = next((j for j in range(pos + 1, end) if width - len(items[j][0]) > max(MAX_PAD, width // 4)), end)
            batch = items[pos:cut]
            pos = cut
            # positions of the batch (relative to node.end) whose logits some request needs
            rel_need = [
                max(0, (need_from[id(item)] if isinstance(item, PrefixNode) else reqs[item].first_scored) - node.end)
                for _, item in batch
            ]
            keep = max(1, width - min(rel_need))
            # A forward of a single row and token takes the matrix-vector path, whose rounding differs
            # enough to shift later positions (all of them attend to a BOS computed that way) by ~1e-4 nats;
            # pad such tiny batches to a few positions (causal: the padding changes nothing else).
            pad_to = max(width, -(-MIN_FORWARD_TOKENS // len(batch)))
            ids = torch.full((len(batch), pad_to), self.eot_token_id or 0, dtype=torch.long)
            for b, (toks, _) in enumerate(batch):
                ids[b, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            has_children = any(isinstance(item, PrefixNode) for _, item in batch)
            result = self._call(ids.to(self.device), prefix, keep=keep + pad_to - width, use_cache=has_children)
            # positions width-keep .. width-1 as [B, keep, V] (the returned logits start at position `off`);
            # log_softmax as stock does
            off = pad_to - result.logits.shape[1]
            logits = result.logits[:, width - keep - off : width - off]
            logprobs = F.log_softmax(logits, dim=-1, dtype=self.softmax_dtype)
            argmax = logprobs.argmax(dim=-1)
            first_col = width - keep  # >= 0: kept columns are first_col .. width-1
            for b, (toks, item) in enumerate(batch):
                start = node.end
                scores = _NodeScores.of_row(logprobs[b], argmax[b], toks, first_col, start)
                if isinstance(item, PrefixNode):
                    own = SharedPrefix.from_cache(result.past_key_values, row=b, length=len(toks))
                    child_prefix = prefix.extend(own) if prefix.length else SharedPrefix(
                        [k.clone() for k in own.keys], [v.clone() for v in own.values]
                    )
                    self._score_node(item, child_prefix, path + [scores], reqs, need_from, out, override_bs, pbar)
                else:
                    out[item] = self._gather(reqs[item], path + [scores])
                    pbar.update(1)
            del result, logits, logprobs

    @staticmethod
    def _gather(req: _Request, parts: list[_NodeScores]):
        """The request's scored positions, read from the segments on its path (root first)."""
        logp = torch.empty(req.n_cont)
        greedy = torch.empty(req.n_cont, dtype=torch.bool)
        first, stop = req.first_scored, len(req.seq) - 1
        for part in parts:
            lo, hi = max(part.kept_from, first), min(part.end, stop)
            if lo >= hi:
                continue
            inner_hi = min(hi, part.end - 1)  # positions whose target lies inside the segment
            if lo < inner_hi:
                logp[lo - first : inner_hi - first] = part.logp[lo - part.kept_from : inner_hi - part.kept_from].cpu()
                greedy[lo - first : inner_hi - first] = part.greedy[lo - part.kept_from : inner_hi - part.kept_from].cpu()
            if hi == part.end:  # the segment's last position: its target is this request's next token
                target = req.seq[part.end]
                logp[part.end - 1 - first] = float(part.last_logprobs[target])
                greedy[part.end - 1 - first] = part.last_argmax == target
        return logp, greedy

    def _token_requests(self, pairs: list[tuple[list[int], list[int]]]) -> list[_Request]:
        reqs, truncated = [], 0
        for context_enc, continuation_enc in pairs:
            assert len(context_enc) > 0 and len(continuation_enc) > 0
            assert len(continuation_enc) <= self.max_length
            whole = context_enc + continuation_enc
            truncated += len(whole) > self.max_length + 1
            reqs.append(_Request(whole[-(self.max_length + 1) :], len(continuation_enc)))  # as stock HFLM
        if truncated:
            log.warning("hf-shared: %d requests longer than max_length %d were truncated from the left", truncated, self.max_length)
        return reqs

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, override_bs: int | None = None):
        if self.shared_unsupported:
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm, override_bs=override_bs)
        reqs = self._token_requests([(ctx, cont) for _, ctx, cont in requests])
        scored = self._score(reqs, override_bs, desc="" if disable_tqdm else "Running loglikelihood requests (shared)")
        res = []
        for (request_str, _, _), (logp, greedy) in zip(requests, scored, strict=True):
            answer = (float(logp.sum()), bool(greedy.all()))
            res.append(answer)
            if request_str is not None:
                self.cache_hook.add_partial("loglikelihood", request_str, answer)
        return res

    def _encode_request(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Tokenise as TemplateLM.loglikelihood does (prefix token for an empty context)."""
        if context == "":
            continuation_enc = self.tok_encode(continuation, add_special_tokens=False)
            if self.prefix_token_id != continuation_enc[0]:
                return [self.prefix_token_id], continuation_enc
            return continuation_enc[:1], continuation_enc[1:]
        return self._encode_pair(context, continuation)

    def per_token_loglikelihood(self, requests, disable_tqdm: bool = False) -> list[list[float]]:
        """``Instance.args = (context, continuation)`` -> one log-probability per continuation token.

        lm-eval's CachingLM only wraps its own three methods, so with ``--use_cache``
        this one reads and writes the cache database itself (same key scheme)."""
        if self.backend != "causal":
            raise NotImplementedError("per_token_loglikelihood needs a causal model")
        db = getattr(self.cache_hook, "dbdict", None)
        results: list[list[float] | None] = [None] * len(requests)
        todo = []
        for i, req in enumerate(requests):
            key = hash_args("per_token_loglikelihood", req.args)
            if db is not None and key in db:
                results[i] = db[key]
            else:
                todo.append(i)
        if todo:
            pairs = [self._encode_request(*requests[i].args) for i in todo]
            scored = self._score(self._token_requests(pairs), desc="" if disable_tqdm else "Running per_token_loglikelihood requests")
            for i, (logp, _) in zip(todo, scored, strict=True):
                results[i] = [float(x) for x in logp]
                self.cache_hook.add_partial("per_token_loglikelihood", requests[i].args, results[i])
        return results  # type: ignore[return-value]

    # --------------------------------------------------------------- generation

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        if self.shared_unsupported or self.think_end_token is not None:
            return super().generate_until(requests, disable_tqdm=disable_tqdm)
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        results: list[str | None] = [None] * len(requests)
        stock: dict[tuple[str, str], list[int]] = {}  # greedy (context, kwargs) -> request indices
        groups: dict[tuple[str, int, str], dict] = {}  # (context, max_gen_toks, until) -> rows
        occurrence: dict[int, int] = {}  # id(instance) -> samples seen (repeats reuse one Instance)
        greedy_rows: dict[tuple[str, str], _Row] = {}
        for i, req in enumerate(requests):
            context, gen_kwargs = req.args
            key = json.dumps(gen_kwargs, sort_keys=True, default=str)
            kwargs = normalize_gen_kwargs(gen_kwargs, self.max_gen_toks)
            until = effective_stops(handle_stop_sequences(kwargs.pop("until", None), eos=eos))
            max_gen = kwargs.pop("max_gen_toks")
            own_seed = kwargs.pop("seed", None)  # a request's own seed (BELIEF's samples carry one)
            if set(kwargs) - SAMPLING_KWARGS:  # e.g. max_length, repetition_penalty: stock handles those
                stock.setdefault((context, key), []).append(i)
                continue
            gkey = (context, max_gen, json.dumps(until))
            group = groups.setdefault(gkey, {"until": until, "max_gen": max_gen, "rows": [], "sampled": False})
            if not kwargs.get("do_sample"):
                if (context, key) in greedy_rows:  # greedy is deterministic: duplicates share a row
                    greedy_rows[(context, key)].requests.append(i)
                else:
                    greedy_rows[(context, key)] = row = _Row([i], do_sample=False)
                    group["rows"].append(row)
                continue
            k = occurrence.get(id(req), 0)
            occurrence[id(req)] = k + 1
            defaults = self.model.generation_config
            top_k = kwargs.get("top_k", defaults.top_k if defaults.top_k is not None else 50)
            top_p = kwargs.get("top_p", defaults.top_p)
            group["rows"].append(
                _Row(
                    [i], do_sample=True,
                    temperature=float(kwargs.get("temperature", 1.0) or 1.0),
                    top_k=int(top_k) if top_k else None,
                    top_p=float(top_p) if top_p is not None and float(top_p) < 1.0 else None,
                    min_p=float(kwargs["min_p"]) if kwargs.get("min_p") else None,
                    seed=int(own_seed) if own_seed is not None else
                    derive_seed(self.sample_seed, req.task_name, req.doc_id, req.idx, k, context, key),
                )
            )
            group["sampled"] = True

        # Greedy-only prompts: stock batched generation (identical to `hf`), one request per distinct pair.
        for gkey, group in list(groups.items()):
            if not group["sampled"]:
                for row in group["rows"]:
                    context, gen_kwargs = requests[row.requests[0]].args
                    stock.setdefault((context, json.dumps(gen_kwargs, sort_keys=True, default=str)), []).extend(row.requests)
                del groups[gkey]
        if stock:
            firsts = [idx[0] for idx in stock.values()]
            texts = super().generate_until([requests[i] for i in firsts], disable_tqdm=disable_tqdm)
            for idx, text in zip(stock.values(), texts, strict=True):
                for i in idx:
                    results[i] = text

        pbar = tqdm(total=sum(len(r.requests) for g in groups.values() for r in g["rows"]),
                    disable=disable_tqdm or self.rank != 0, desc="Running generate_until requests (shared prompt)")
        for (context, _, _), group in groups.items():
            rows = group["rows"]
            for lo in range(0, len(rows), self.max_decode_rows):
                self._decode_rows(context, rows[lo : lo + self.max_decode_rows], group["until"], group["max_gen"])
            for row in rows:
                text = postprocess_generated_text(self.tok_decode(row.tokens), group["until"], None)
                for i in row.requests:
                    results[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                pbar.update(len(row.requests))
        pbar.close()
        return results  # type: ignore[return-value]

    def _next_tokens(self, logits: torch.Tensor, rows: list[_Row], generators: list[torch.Generator | None]) -> list[int]:
        """One token per row: argmax for greedy rows; for sampled rows transformers' warpers
        (temperature, top-k, top-p, min-p, in that order) on the whole block of rows sharing
        settings, then an inverse-CDF draw from one uniform of the row's own generator."""
        logits = logits.float()
        chosen = logits.argmax(dim=-1).tolist()
        blocks: dict[tuple, list[int]] = {}
        for b, row in enumerate(rows):
            if row.do_sample:
                blocks.setdefault((row.temperature, row.top_k, row.top_p, row.min_p), []).append(b)
        for (temperature, top_k, top_p, min_p), idx in blocks.items():
            scores = logits[idx] / temperature
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
            u = torch.tensor([float(torch.rand(1, generator=generators[b])) for b in idx], device=cdf.device)
            drawn = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).clamp_(max=cdf.shape[-1] - 1)
            for b, tok in zip(idx, drawn[:, 0].tolist(), strict=True):
                chosen[b] = tok
        return chosen

    def _decode_rows(self, context: str, rows: list[_Row], until: list[str], max_gen: int) -> None:
        """Prefill ``context`` once, then decode all ``rows`` as one batch on its cache."""
        max_ctx_len = self.max_length - max_gen
        assert max_ctx_len > 0, f"max_gen_toks ({max_gen}) must be below the model's max_length ({self.max_length})"
        context_enc, _ = self.tok_batch_encode([context], left_truncate_len=max_ctx_len, truncation=self.truncation)
        context_enc = context_enc.to(self.device)
        prefill = self._call(context_enc, SharedPrefix.empty(), keep=1, use_cache=True)
        prefix = SharedPrefix.from_cache(prefill.past_key_values)
        generators = []
        for row in rows:
            row.tokens = []
            gen = None
            if row.do_sample:
                gen = torch.Generator().manual_seed(row.seed % (2**63))
            generators.append(gen)
        eos_ids = self.model.generation_config.eos_token_id
        eos_ids = set(eos_ids if isinstance(eos_ids, list) else [eos_ids] if eos_ids is not None else [self.eot_token_id])
        active = list(range(len(rows)))
        needed = 0
        logits = prefill.logits[:, -1].expand(len(rows), -1)
        past = None
        while active:
            nxt = self._next_tokens(logits, [rows[a] for a in active], [generators[a] for a in active])
            still = []
            for j, (a, tok) in enumerate(zip(active, nxt, strict=True)):
                row = rows[a]
                if tok in eos_ids:
                    needed += len(row.tokens)  # every token it generated was fed back
                    continue
                row.tokens.append(tok)
                if len(row.tokens) >= max_gen or any(s and s in self.tok_decode(row.tokens) for s in until):
                    needed += len(row.tokens) - 1  # its last token is never fed back
                    continue
                still.append(j)
            if not still:
                break
            if past is not None and len(still) < len(active):
                keep_idx = torch.tensor(still, device=self.device)
                for layer in past.layers:
                    layer.keys, layer.values = layer.keys[keep_idx], layer.values[keep_idx]
            feed = torch.tensor([[nxt[j]] for j in still], dtype=torch.long, device=self.device)
            active = [active[j] for j in still]
            step = self._call(feed, prefix, past=past, use_cache=True)
            past, logits = step.past_key_values, step.logits[:, -1]
        # the floor of the decoding work: tokens each row has to feed back (the prompt is counted by the caller)
        self.stats["generated_tokens"] = self.stats.get("generated_tokens", 0) + needed
