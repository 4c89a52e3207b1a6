"""Attention over a batch-1 shared prefix broadcast to every row, without copying it.

transformers routes attention through ``AttentionInterface``; we register one more
implementation. The model is called with only the rows' own (suffix) tokens and
``shared_prefix=SharedPrefix(...)`` as a forward kwarg, which transformers passes
down to the attention function. Per layer we compute

    softmax([q K_prefix^T, q K_suffix^T + causal]) [V_prefix; V_suffix]

with the prefix's keys/values kept once (batch 1): the query rows of the whole batch
are folded into one matrix per key/value head, so the prefix matmul is a plain
bmm over heads and the prefix is never expanded or concatenated per row.
Without ``shared_prefix`` the function is stock SDPA.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

IMPLEMENTATION = "belief_shared_prefix"


@dataclass
class SharedPrefix:
    """Per-layer keys and values of a prefix, each ``[1, kv_heads, length, head_dim]``."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].shape[-2] if self.keys else 0

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

    def extend(self, other: "SharedPrefix") -> "SharedPrefix":
        """This prefix followed by ``other`` (one concatenation per layer: a child node's own cache)."""
        if not self.keys:
            return other
        return SharedPrefix(
            [torch.cat([a, b], dim=-2) for a, b in zip(self.keys, other.keys, strict=True)],
            [torch.cat([a, b], dim=-2) for a, b in zip(self.values, other.values, strict=True)],
        )


def shared_prefix_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """``query [B, Hq, S, D]``; ``key``/``value [B, Hkv, T, D]`` are the rows' own positions
    (T >= S: a decoding cache may hold earlier suffix positions); the queries are the last S of them.
    Returns ``(output [B, S, Hq, D], None)`` like transformers' SDPA integration."""
    prefix: SharedPrefix | None = kwargs.pop("shared_prefix", None)
    if prefix is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    for unsupported in ("s_aux", "sinks", "softcap", "sliding_window"):
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError(f"shared-prefix attention does not support {unsupported}")

    bsz, n_heads, q_len, dim = query.shape
    n_kv = key.shape[1]
    group = n_heads // n_kv
    kv_len = key.shape[2]
    scale = scaling if scaling is not None else dim**-0.5
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
    if prefix.length:
        pk = prefix.keys[layer][0].to(work)  # [Hkv, P, D]
        pv = prefix.values[layer][0].to(work)
        q_heads = q.transpose(0, 1).reshape(n_kv, bsz * group * q_len, dim)  # all rows as one matrix per head
        prefix_scores = torch.bmm(q_heads, pk.transpose(-1, -2))  # [Hkv, B*G*S, P]
        prefix_scores = prefix_scores.reshape(n_kv, bsz, group * q_len, -1).transpose(0, 1)  # view
        row_max = torch.maximum(row_max, prefix_scores.amax(dim=-1, keepdim=True))
        prefix_probs = torch.exp(prefix_scores - row_max)
        denom = prefix_probs.sum(dim=-1, keepdim=True)
        out = torch.bmm(
            prefix_probs.transpose(0, 1).reshape(n_kv, bsz * group * q_len, -1), pv
        ).reshape(n_kv, bsz, group * q_len, dim).transpose(0, 1)
    else:
        denom, out = 0.0, 0.0
    suffix_probs = torch.exp(suffix_scores - row_max)
    denom = denom + suffix_probs.sum(dim=-1, keepdim=True)
    out = (out + suffix_probs @ v) / denom  # [B, Hkv, G*S, D]
    out = out.reshape(bsz, n_heads, q_len, dim).transpose(1, 2).contiguous().to(query.dtype)
    return out, None


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
    configs = {id(c): c for c in [model.config, *(getattr(m, "config", None) for m in model.modules())] if c is not None}
    saved = {k: c._attn_implementation_internal for k, c in configs.items()}
    try:
        for c in configs.values():
            c._attn_implementation_internal = IMPLEMENTATION
        yield
    finally:
        for k, c in configs.items():
            c._attn_implementation_internal = saved[k]
