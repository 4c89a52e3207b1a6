"""Attention over a batch-1 shared prefix read by every row of a batch.

transformers routes attention through ``AttentionInterface``; we register one more
implementation. The model is called with only the rows' own (suffix) tokens and
``shared_prefix=SharedPrefix(...)`` as a forward kwarg, which transformers passes
down to the attention function. Per layer we compute

    softmax([q K_prefix^T, q K_suffix^T + causal]) [V_prefix; V_suffix]

with the prefix's keys/values kept once (batch 1), in one of two ways (``fused`` chooses):

* fused: one SDPA kernel over [the prefix, broadcast or gathered per row; the row's own keys]
  under a boolean mask, in row chunks of at most ``GATHER_POSITIONS`` positions (the copy
  lives for one layer's call). Every batch on an accelerator, where a small model is bound
  by kernel launches; on the CPU, batches of many short prefixes (BEAR's facts, decoding);
* folded: the query rows of the whole batch folded into one matrix per key/value head, so
  the prefix matmul is a plain bmm over heads and the prefix is never copied per row (about
  20 eager operations per layer): on the CPU, long prefixes (IC-LKE's contexts).

A batch may also hold rows of several prefixes (:class:`RowPrefixes`: sibling tree nodes
scored together, or the samples of several prompts decoded together); each contiguous run
of rows then reads its own prefix. Without ``shared_prefix`` the function is stock SDPA.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

IMPLEMENTATION = "belief_shared_prefix"
GATHER_POSITIONS = 1 << 17  # rows x longest prefix up to which a batch's prefixes are copied per row
#: the fused path on every device (True), never (False), or as ``fused`` decides (None); tests set it
FUSED: bool | None = None


@dataclass
class SharedPrefix:
    """Per-layer keys and values of a prefix, each ``[1, kv_heads, length, head_dim]``.

    A tree node's prefix is its parent's followed by its own segment: ``keys``/``values`` hold the segment's own
    positions and ``parent`` the prefix before them, which is read, never copied (a copy per node held a
    relation's whole 50-example context once per test fact). ``layer`` joins the chain for one layer's call, and
    the joined copy is dropped after it."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    parent: "SharedPrefix | None" = None
    _mask: tuple | None = field(default=None, repr=False, compare=False)  # (shape key, mask): every layer's

    @property
    def own_length(self) -> int:
        return self.keys[0].shape[-2] if self.keys else 0

    @property
    def length(self) -> int:
        return self.own_length + (self.parent.length if self.parent is not None else 0)

    def layer(self, layer: int, which: str) -> torch.Tensor:
        """Layer ``layer``'s keys (``which="keys"``) or values of the whole prefix, ``[1, Hkv, length, D]``: the
        segments from the root on, joined (one copy, for this call only) when there are several."""
        parts: list[torch.Tensor] = []
        node: SharedPrefix | None = self
        while node is not None:
            if node.own_length:
                parts.append(getattr(node, which)[layer])
            node = node.parent
        return parts[0] if len(parts) == 1 else torch.cat(parts[::-1], dim=-2)

    def rows(self, layer: int, which: str, lo: int, hi: int) -> torch.Tensor:
        """Layer ``layer``'s keys or values for rows ``lo:hi``: the prefix broadcast (a view of ``layer``'s)."""
        return self.layer(layer, which).expand(hi - lo, -1, -1, -1)

    def mask(self, q_len: int, kv_len: int, device) -> torch.Tensor:
        """``[1, 1, q_len, length + kv_len]``: every query sees the whole prefix, and its own keys causally."""
        if self._mask is None or self._mask[0] != (q_len, kv_len):
            seen = torch.ones(q_len, self.length, dtype=torch.bool, device=device)
            self._mask = ((q_len, kv_len), torch.cat([seen, _causal(q_len, kv_len, device)], dim=-1)[None, None])
        return self._mask[1]

    @property
    def device(self) -> torch.device:
        node: SharedPrefix | None = self
        while node is not None and not node.own_length:
            node = node.parent
        return node.keys[0].device if node is not None else torch.device("cpu")

    @classmethod
    def empty(cls) -> "SharedPrefix":
        return cls([], [])

    @classmethod
    def from_cache(cls, cache, row: int = 0, length: int | None = None) -> "SharedPrefix":
        """One row's first ``length`` positions of a transformers Cache (views, no copy)."""
        keys, values = [], []
        for layer in cache.layers:
            keys.append(layer.keys[row : row + 1, :, :length])
            values.append(layer.values[row : row + 1, :, :length])
        return cls(keys, values)

    def after(self, parent: "SharedPrefix") -> "SharedPrefix":
        """These positions, copied out of the batch's cache (which is then freed), as the continuation of
        ``parent``: a child node's prefix."""
        return SharedPrefix(
            [k.clone() for k in self.keys], [v.clone() for v in self.values], parent if parent.length else None
        )


@dataclass
class RowPrefixes:
    """A batch whose rows read different prefixes: rows ``[bounds[k], bounds[k + 1])`` read
    ``prefixes[k]`` (rows of one prefix are contiguous), so sibling tree nodes are scored in
    one forward while each prefix is still kept once."""

    prefixes: list[SharedPrefix]
    bounds: list[int]
    #: decoding reads the same prefixes every step: keep each layer's pool of them (scoring reads them once)
    reused: bool = False
    _index: tuple | None = field(default=None, repr=False)
    _pools: dict = field(default_factory=dict, repr=False)
    _mask: tuple | None = field(default=None, repr=False)

    def runs(self):
        return [(lo, hi, p) for lo, hi, p in zip(self.bounds, self.bounds[1:], self.prefixes, strict=False) if p.length]

    def offsets(self) -> list[int]:
        """Each row's first position (its prefix's length)."""
        return [
            p.length
            for lo, hi, p in zip(self.bounds, self.bounds[1:], self.prefixes, strict=False)
            for _ in range(lo, hi)
        ]

    def gathers(self) -> bool:
        """Copy each row's prefix next to its own keys (one attention call per layer) rather than
        loop over runs of rows: worth it for many short prefixes (BEAR's facts), not for long ones."""
        runs = self.runs()
        return len(runs) > 1 and max(p.length for _, _, p in runs) * self.bounds[-1] <= GATHER_POSITIONS

    def rows(self, layer: int, which: str, lo: int, hi: int) -> torch.Tensor:
        """Layer ``layer``'s prefix keys (``which="keys"``) or values of rows ``lo:hi``, ``[hi - lo, Hkv, Pmax, D]``
        (positions past a row's own prefix hold copies and are masked by :meth:`mask`)."""
        index, _ = self._row_index()
        pool = self._pools.get((layer, which))
        if pool is None:  # [Hkv, sum P, D]
            pool = torch.cat([p.layer(layer, which)[0] for p in self.prefixes if p.length], dim=1)
            if self.reused:
                self._pools[layer, which] = pool
        return pool[:, index[lo:hi]].transpose(0, 1)

    def valid(self) -> torch.Tensor:
        """``[B, Pmax]``: which gathered positions belong to the row's prefix."""
        return self._row_index()[1]

    def mask(self, q_len: int, kv_len: int, device) -> torch.Tensor:
        """``[B, 1, q_len, Pmax + kv_len]``: a row's queries see its own prefix, and its own keys causally."""
        if self._mask is None or self._mask[0] != (q_len, kv_len):
            valid = self.valid()
            bsz = valid.shape[0]
            mask = torch.cat(
                [
                    valid[:, None, None, :].expand(bsz, 1, q_len, -1),
                    _causal(q_len, kv_len, device).expand(bsz, 1, q_len, kv_len),
                ],
                dim=-1,
            )
            self._mask = ((q_len, kv_len), mask)
        return self._mask[1]

    def _row_index(self):
        if self._index is None:
            lengths = torch.tensor(self.offsets())
            starts, total = [], 0
            for lo, hi, p in zip(self.bounds, self.bounds[1:], self.prefixes, strict=False):
                starts += [total] * (hi - lo)
                total += p.length
            pos = torch.arange(int(lengths.max()))[None, :]
            valid = pos < lengths[:, None]
            index = torch.tensor(starts)[:, None] + torch.minimum(pos, (lengths[:, None] - 1).clamp(min=0))
            device = next(p.device for p in self.prefixes if p.length)
            self._index = (index.clamp(max=max(total - 1, 0)).to(device), valid.to(device))
        return self._index


def _causal(q_len: int, kv_len: int, device) -> torch.Tensor:
    """``[q_len, kv_len]``: query i (at position kv_len - q_len + i of the rows' own keys) sees keys up to its own."""
    return torch.arange(kv_len, device=device)[None, :] <= torch.arange(kv_len - q_len, kv_len, device=device)[:, None]


def fused(prefix: "SharedPrefix | RowPrefixes", device: torch.device) -> bool:
    """Whether a batch takes the fused path: one SDPA kernel per layer over [the rows' prefix; their own keys],
    the prefix copied next to each row's keys (in row chunks of at most ``GATHER_POSITIONS`` positions). Else the
    folded path: all rows' queries as one matrix against the prefix kept once, about 20 eager operations per layer.

    On an accelerator always: there kernel launches, not copies, bound a small model (docs/benchmarks.md, "On a
    GPU"). On the CPU, where every operation is a loop over memory, only for many short prefixes (BEAR's facts):
    copying a long prefix (IC-LKE's ~400-token contexts) per row costs more there than the eager operations."""
    if FUSED is not None:
        return FUSED
    if device.type != "cpu":
        return True
    return isinstance(prefix, RowPrefixes) and prefix.gathers()


def _fused_attention(query, key, value, prefix: "SharedPrefix | RowPrefixes", layer: int, scale: float):
    """SDPA over [each row's prefix (broadcast, or gathered and masked past its length); the row's keys (causal)]."""
    bsz, _, q_len, _ = query.shape
    kv_len = key.shape[2]
    mask = prefix.mask(q_len, kv_len, query.device)
    plen = mask.shape[-1] - kv_len
    per = max(1, GATHER_POSITIONS // (plen + kv_len))
    outs = []
    for lo in range(0, bsz, per):
        hi = min(bsz, lo + per)
        keys = torch.cat([prefix.rows(layer, "keys", lo, hi).to(key.dtype), key[lo:hi]], dim=2)
        values = torch.cat([prefix.rows(layer, "values", lo, hi).to(value.dtype), value[lo:hi]], dim=2)
        rows_mask = mask[lo:hi] if mask.shape[0] > 1 else mask
        outs.append(
            F.scaled_dot_product_attention(
                query[lo:hi], keys, values, attn_mask=rows_mask, scale=scale, enable_gqa=True
            )
        )
    out = outs[0] if len(outs) == 1 else torch.cat(outs)
    return out.transpose(1, 2).contiguous(), None


def _prefix_part(q, pk, pv, suffix_max, n_kv):
    """The prefix's share for the query rows ``q [b, Hkv, G*S, D]`` (already scaled):
    the running max (prefix and suffix), the prefix's softmax denominator and its weighted values."""
    b, _, gs, dim = q.shape
    q_heads = q.transpose(0, 1).reshape(n_kv, b * gs, dim)  # all rows as one matrix per kv head
    scores = torch.bmm(q_heads, pk.transpose(-1, -2))  # [Hkv, b*G*S, P]
    scores = scores.reshape(n_kv, b, gs, -1).transpose(0, 1)  # view
    row_max = torch.maximum(suffix_max, scores.amax(dim=-1, keepdim=True))
    probs = torch.exp(scores - row_max)
    denom = probs.sum(dim=-1, keepdim=True)
    out = torch.bmm(probs.transpose(0, 1).reshape(n_kv, b * gs, -1), pv).reshape(n_kv, b, gs, dim).transpose(0, 1)
    return row_max, denom, out


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """``query [B, Hq, S, D]``; ``key``/``value [B, Hkv, T, D]`` are the rows' own positions
    (T >= S: a decoding cache may hold earlier suffix positions); the queries are the last S of them.
    ``shared_prefix`` is a :class:`SharedPrefix` (every row) or :class:`RowPrefixes`.
    Returns ``(output [B, S, Hq, D], None)`` like transformers' SDPA integration."""
    prefix = kwargs.pop("shared_prefix", None)
    if prefix is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    for unsupported in ("s_aux", "sinks", "softcap", "sliding_window"):
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError(f"shared-prefix attention does not support {unsupported}")

    bsz, n_heads, q_len, dim = query.shape
    n_kv = key.shape[1]
    group = n_heads // n_kv
    kv_len = key.shape[2]
    scale = scaling if scaling is not None else dim**-0.5
    if (prefix.length if isinstance(prefix, SharedPrefix) else prefix.runs()) and fused(prefix, query.device):
        return _fused_attention(query, key, value, prefix, module.layer_idx, scale)
    work = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype

    # Heads h of one kv head are h = kv * group + g (transformers' repeat_kv layout).
    q = query.to(work).reshape(bsz, n_kv, group * q_len, dim) * scale
    k, v = key.to(work), value.to(work)

    suffix_scores = q @ k.transpose(-1, -2)  # [B, Hkv, G*S, T]
    q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device).repeat(group)  # query i sits at T-S+i
    causal = torch.arange(kv_len, device=q.device)[None, :] <= q_pos[:, None]  # [G*S, T]
    suffix_scores = suffix_scores.masked_fill(~causal, float("-inf"))
    row_max = suffix_scores.amax(dim=-1, keepdim=True)

    layer = module.layer_idx
    runs = prefix.runs() if isinstance(prefix, RowPrefixes) else [(0, bsz, prefix)] if prefix.length else []
    denom: torch.Tensor | float = 0.0  # no prefix: the suffix alone
    out: torch.Tensor | float = 0.0
    if len(runs) == 1 and runs[0][:2] == (0, bsz):  # one prefix for every row: no per-run copies
        p = runs[0][2]
        pk, pv = p.layer(layer, "keys")[0].to(work), p.layer(layer, "values")[0].to(work)
        row_max, denom, out = _prefix_part(q, pk, pv, row_max, n_kv)
    elif runs:
        row_max = row_max.clone()
        denoms, outs = torch.zeros_like(row_max), torch.zeros_like(q)
        for lo, hi, p in runs:
            pk, pv = p.layer(layer, "keys")[0].to(work), p.layer(layer, "values")[0].to(work)
            row_max[lo:hi], denoms[lo:hi], outs[lo:hi] = _prefix_part(q[lo:hi], pk, pv, row_max[lo:hi], n_kv)
        denom, out = denoms, outs
    suffix_probs = torch.exp(suffix_scores - row_max)
    total = suffix_probs.sum(dim=-1, keepdim=True) + denom  # (a + b == b + a in floating point)
    attended = (suffix_probs @ v + out) / total  # [B, Hkv, G*S, D]
    return attended.reshape(bsz, n_heads, q_len, dim).transpose(1, 2).contiguous().to(query.dtype), None


def register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(IMPLEMENTATION, shared_prefix_attention)


@contextlib.contextmanager
def shared_prefix_mode(model):
    """Route ``model``'s attention through :func:`shared_prefix_attention` for the duration.

    Set on the config object the attention modules read at call time; no mask
    function is registered for our name, so transformers builds no mask (we need none:
    rows are right-padded and the function applies causality itself)."""
    register()
    configs = {
        id(c): c for c in [model.config, *(getattr(m, "config", None) for m in model.modules())] if c is not None
    }
    saved = {k: c._attn_implementation_internal for k, c in configs.items()}
    try:
        for c in configs.values():
            c._attn_implementation_internal = IMPLEMENTATION
        yield
    finally:
        for k, c in configs.items():
            c._attn_implementation_internal = saved[k]
