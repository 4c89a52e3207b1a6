"""Seeded samples of our tasks on stock ``hf``, decoded many at a time (harness hook 5).

BELIEF's K samples per prompt each carry their own ``seed`` in their generation kwargs.
lm-eval's ``HFLM.generate_until`` batches requests with identical kwargs only, so every
seeded sample used to be one ``generate`` call of its own (``ONE_BY_ONE``, kept for the
benchmark). Here seeded sampled requests are grouped by their kwargs without the seed and
without redundant stop strings, and each batch is decoded by greedy ``generate`` calls whose
last logits processor draws every row's token itself:

* row ``r`` owns ``torch.Generator(device).manual_seed(seed_r % 2**63)``; each step it takes
  the scores after HF's own processors, applies the sampling warpers HF would have applied
  (``sampling_warpers``), and draws ``torch.multinomial(softmax(row), 1, generator=g_r)``:
  the call HF's ``_sample`` makes for a batch of one under ``torch.manual_seed(seed_r)``, so
  a row consumes the same random stream as the old one-request path;
* the row's scores become ``-inf`` except 0 at the drawn token, so greedy selection picks it.

A row's text depends on its own seed only (and on float noise of the batched forward, as
for any batched greedy request). Rows of one batch with the same prompt (BELIEF: the K
samples) share one prefill: the distinct prompts are encoded once and their key/value
cache is gathered to the rows (``_shared_prefill``). A row stops where the one-request path
stops it (``RowStops``: lm-eval's stop-sequence criteria, EOS); a ``generate`` call ends once
half its rows are done and the others go on in the next call on its cache, so finished rows
are not decoded on (``_decode_rounds``). A seeded sample this path does not take (``batchable``)
is drawn alone by stock, seed popped, under ``torch.manual_seed(seed)`` (``one_seeded``). Every
request that is not a seeded sample of ours goes to lm-eval's own ``generate_until`` as it came.
"""

from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, cast

import torch
from tqdm import tqdm
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation import logits_process as lp

from belief_tasks.hooks.lm_eval_api import (
    cache_hook,
    collator,
    derived_instance,
    handle_stop_sequences,
    normalize_gen_kwargs,
    postprocess_generated_text,
    stop_sequences_criteria,
)
from belief_tasks.requests import effective_stops, is_seeded_sample

log = logging.getLogger(__name__)

#: environment switch: "one-by-one" restores one ``generate`` call per seeded sample
SWITCH = "BELIEF_HF_SEEDED_SAMPLING"
ONE_BY_ONE = "one-by-one"

#: HF's sampling warpers (applied only when sampling), in GenerationMixin._get_logits_processor's order
WARPER_KNOBS = ("temperature", "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff")
#: kwargs (after lm-eval's normalisation) a batched seeded request may carry; any other one keeps the old path
BATCHED_KWARGS = {"do_sample", "until", "max_gen_toks", "seed", *WARPER_KNOBS}


def batchable(lm, args) -> bool:
    """Whether a request takes the batched path: a seeded sample with only the kwargs above,
    on a causal model whose ``_model_generate`` is lm-eval's (a subclass may not pass our
    logits processor on) and whose generation config samples plainly."""
    if os.environ.get(SWITCH, "").strip().lower() == ONE_BY_ONE or not is_seeded_sample(args):
        return False
    from lm_eval.models.huggingface import HFLM

    if getattr(lm, "backend", None) != "causal" or type(lm)._model_generate is not HFLM._model_generate:
        return False
    cfg = lm.model.generation_config
    if (cfg.num_beams or 1) > 1 or (cfg.num_return_sequences or 1) > 1 or cfg.renormalize_logits:
        return False
    if getattr(cfg, "watermarking_config", None) is not None:
        return False
    return set(normalize_gen_kwargs(args[1], 1)) <= BATCHED_KWARGS


def generate_until(
    lm, requests: list, seeded: list[bool], disable_tqdm: bool, stock: Callable[[list], list]
) -> list[str]:
    """Every request's text. ``seeded[i]``: request ``i`` is a sample of a task of ours with its own seed
    (``harness.seeded_sample_of_ours``): decoded in shared batches here where ``batchable``, else alone under
    its seed (``one_seeded``). Every other request goes through ``stock`` (lm-eval's ``generate_until``)
    exactly as it came."""
    mine: list[int] = []
    alone: list[int] = []
    rest: list[int] = []
    for i, s in enumerate(seeded):
        (rest if not s else mine if batchable(lm, requests[i].args) else alone).append(i)
    log.info(
        "generate_until: %d seeded samples decoded in shared batches, %d one by one, %d requests through stock hf",
        len(mine),
        len(alone),
        len(rest),
    )
    out: list[Any] = [None] * len(requests)
    with _fixed_batch_size(lm) as batch_size:
        if rest:
            for i, text in zip(rest, stock([requests[i] for i in rest]), strict=True):
                out[i] = text
        if mine:
            for i, text in zip(
                mine, generate_seeded(lm, [requests[i].args for i in mine], batch_size, disable_tqdm), strict=True
            ):
                out[i] = text
        for i in alone:
            out[i] = one_seeded(lm, requests[i], stock)
    return out


def one_seeded(lm, request, stock: Callable[[list], list]) -> str:
    """The one-request path: ``request`` without its ``seed`` (HF's ``generate`` refuses unknown kwargs) through
    ``stock``, alone, drawn under ``torch.manual_seed(seed % 2**63)``, in a forked RNG (the run's global stream
    stays as it was). The text is filed in the cache under the request's own arguments, seed included
    (stock would file it under the seedless ones)."""
    context, kwargs = request.args
    kwargs = dict(kwargs)
    seed = int(kwargs.pop("seed"))
    bare = derived_instance(request, arguments=(context, kwargs))
    hook = lm.cache_hook
    lm.set_cache_hook(cache_hook(None))
    try:
        with torch.random.fork_rng(devices=[lm.device] if lm.device.type == "cuda" else []):
            torch.manual_seed(seed % 2**63)
            (text,) = stock([bare])
    finally:
        lm.set_cache_hook(hook)
    hook.add_partial("generate_until", request.args, text)
    return text


class _fixed_batch_size:
    """``batch_size=auto``: detect once, as stock ``generate_until`` does at its start, and run both
    paths at that size. One detection per call on every rank keeps the ranks' collectives
    (the detection gathers over processes) in step whatever each rank's mix of requests."""

    def __init__(self, lm):
        self.lm, self.saved = lm, lm.batch_size_per_gpu

    def __enter__(self) -> int:
        if self.lm.batch_size == "auto":
            print("Passed argument batch_size = auto. Detecting largest batch size")
            self.lm.batch_size_per_gpu = self.lm._detect_batch_size()
            print(f"Determined Largest batch size: {self.lm.batch_size_per_gpu}")
        return int(self.lm.batch_size)

    def __exit__(self, *exc) -> None:
        self.lm.batch_size_per_gpu = self.saved


@dataclass(frozen=True)
class _Row:
    args: tuple  # the request's own (context, gen_kwargs): the cache key
    seed: int
    group: dict  # its kwargs without the seed, with effective stop strings: rows that may share a batch

    @property
    def context(self) -> str:
        return self.args[0]


def _row(lm, args: tuple, eos: str) -> _Row:
    kwargs = normalize_gen_kwargs(args[1], lm.max_gen_toks)
    seed = int(kwargs.pop("seed")) % 2**63  # as the old hook seeded torch
    kwargs["until"] = effective_stops(handle_stop_sequences(kwargs.pop("until", None), eos=eos))
    return _Row(args, seed, dict(kwargs))


def generate_seeded(lm, args: list[tuple], batch_size: int, disable_tqdm: bool = False) -> list[str]:
    """The texts of seeded sampled requests (``args``: their (context, gen_kwargs)), in order.
    Batches as stock ``generate_until`` does: by group, longest context first, ``batch_size`` rows."""
    eos = lm.tok_decode(lm.eot_token_id, skip_special_tokens=False)
    rows = [_row(lm, a, eos) for a in args]
    lengths = {c: len(lm.tok_encode(c)) for c in {r.context for r in rows}}  # K samples: one encoding
    batches = collator(
        rows, sort_fn=lambda r: (-lengths[r.context], r.context), group_fn=lambda r: r.group, group_by="gen_kwargs"
    )
    pbar = tqdm(
        total=len(rows),
        disable=disable_tqdm or lm.rank != 0,
        desc="Running generate_until requests (seeded samples, batched)",
    )
    texts: list[str] = []
    for chunk in batches.get_batched(n=batch_size):
        for row, text in zip(chunk, _generate_batch(lm, chunk), strict=True):
            texts.append(text)
            lm.cache_hook.add_partial("generate_until", row.args, text)
            pbar.update(1)
    pbar.close()
    return batches.get_original(texts)


def _generate_batch(lm, rows: list[_Row]) -> list[str]:
    """The texts of ``rows`` (one group), encoded as stock encodes a batch: left-padded,
    left-truncated contexts, at most ``max_gen_toks`` new tokens, lm-eval's stop criteria."""
    group = rows[0].group  # its do_sample (True) is not passed on: our sampler replaces HF's draw
    until, max_gen_toks = group["until"], group["max_gen_toks"]
    knobs = {k: group[k] for k in WARPER_KNOBS if k in group}
    max_ctx_len = lm.max_length - max_gen_toks
    assert max_ctx_len > 0, (
        f"Invalid configuration: requested max tokens to generate ({max_gen_toks}) must be less than model's "
        f"maximum sequence length ({lm.max_length})."
    )
    ids, mask = lm.tok_batch_encode([r.context for r in rows], left_truncate_len=max_ctx_len, truncation=lm.truncation)
    ids, mask = ids.to(lm.device), mask.to(lm.device)
    sampler = SeededRowSampler(
        [r.seed for r in rows], sampling_warpers(sampling_config(lm.model, knobs), ids.device), ids.device
    )
    toks = _decode_rounds(lm, ids, mask, sampler, until, ids.shape[1] + max_gen_toks)
    return [_text(lm, t, r.args[1]) for t, r in zip(toks, rows, strict=True)]


def _decode_rounds(lm, ids, mask, sampler: "SeededRowSampler", until: list[str], max_length: int) -> list[list[int]]:
    """Each row's new tokens up to where the one-request path stops it: a stop string seen by
    lm-eval's criteria, an EOS token, or ``max_length``. One ``generate`` call per round; a
    round ends once half its rows are done, and the next one goes on with the others only,
    on the cache of the last (HF's ``generate`` keeps computing finished rows)."""
    ctx_len, n = ids.shape[1], ids.shape[0]
    out: list[list[int] | None] = [None] * n
    active = list(range(n))
    cache = _shared_prefill(lm, ids, mask)  # generate's kwargs: {} or the rows' prompt cache
    while active:
        stops = RowStops(lm, until, ctx_len, len(active), max(1, (len(active) + 1) // 2))
        with torch.autocast(
            device_type=lm.device.type, dtype=lm.mixed_precision_dtype, enabled=lm.mixed_precision_dtype is not None
        ):
            res = lm.model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_length=max_length,
                do_sample=False,
                stopping_criteria=StoppingCriteriaList([stops]),
                logits_processor=LogitsProcessorList([sampler]),
                pad_token_id=lm.tokenizer.pad_token_id,
                use_cache=True,
                return_dict_in_generate=True,
                **cache,
            )
        seqs = res.sequences
        keep = []
        for j, row in enumerate(active):
            end = stops.done_at[j] or (seqs.shape[1] if seqs.shape[1] >= max_length else None)
            if end is None:
                keep.append(j)
            else:
                out[row] = seqs[j, ctx_len:end].tolist()
        if not keep:
            break
        index = torch.tensor(keep, device=seqs.device)
        ids = seqs.index_select(0, index)
        mask = torch.cat([mask, mask.new_ones(n, seqs.shape[1] - mask.shape[1])], dim=1).index_select(0, index)
        cache = {"past_key_values": _gather(res.past_key_values, index)}
        sampler.keep(keep)
        active, n = [active[j] for j in keep], len(keep)
    return out  # type: ignore[return-value]


class RowStops(StoppingCriteria):
    """Per row, the step where the one-request path would stop it: lm-eval's stop-sequence
    criteria (their per-row trackers, same look-back) or an EOS token. Ends the ``generate``
    call when ``end_round`` rows are done, so that the caller can drop them."""

    def __init__(self, lm, until: list[str], ctx_len: int, n_rows: int, end_round: int):
        self.criteria = stop_sequences_criteria(lm.tokenizer, until, ctx_len, n_rows)
        eos = lm.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [lm.eot_token_id] if eos is None else [eos]
        self.eos = set(eos) | {lm.eot_token_id}
        self.done_at: list[int | None] = [None] * n_rows
        self.end_round = end_round

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        for c in self.criteria:
            c(input_ids, scores)
        last = input_ids[:, -1].tolist()
        for r, at in enumerate(self.done_at):
            if at is None and (last[r] in self.eos or any(c.done_tracker[r] for c in self.criteria)):
                self.done_at[r] = input_ids.shape[1]
        done = [at is not None for at in self.done_at]
        if sum(done) >= self.end_round:
            done = [True] * len(done)
        return cast(torch.BoolTensor, torch.tensor(done, dtype=torch.bool, device=input_ids.device))


def _gather(cache, index: torch.Tensor):
    """``cache`` with the batch rows ``index`` (in that order, repeats allowed). Plain dynamic
    layers by ``index_select`` (on CPU ~10x faster than the advanced indexing of
    ``batch_select_indices``, which any other layer type gets)."""
    from transformers.cache_utils import DynamicLayer

    for layer in cache.layers:
        if type(layer) is DynamicLayer and layer.keys is not None and layer.values is not None and layer.keys.numel():
            layer.keys, layer.values = layer.keys.index_select(0, index), layer.values.index_select(0, index)
        else:
            layer.batch_select_indices(index)
    return cache


def _text(lm, cont_toks: list[int], gen_kwargs: dict) -> str:
    """A row's text as stock ``generate_until`` makes it, cut at the request's own stop strings."""
    eos = lm.tok_decode(lm.eot_token_id, skip_special_tokens=False)
    until = handle_stop_sequences(normalize_gen_kwargs(gen_kwargs, lm.max_gen_toks)["until"], eos=eos)
    think = lm.think_end_token
    if isinstance(think, int):
        ends = [i for i, t in enumerate(cont_toks) if t == think]
        cont_toks = cont_toks[ends[-1] + 1 :] if ends else cont_toks
    s = lm.tok_decode(cont_toks)
    if isinstance(think, int):
        s = s.lstrip()
    return postprocess_generated_text(
        generation=s, stop=until, think_end_token=think if isinstance(think, str) else None
    )


# --- sampling ---------------------------------------------------------------------------------------


def sampling_config(model, knobs: dict):
    """The generation config HF's ``generate`` would sample with, given the request's knobs:
    the model's generation config and HF's defaults under them (e.g. its default top_k)."""
    prepare = getattr(model, "_prepare_generation_config", None)
    if prepare is not None:
        return prepare(None, do_sample=True, **knobs)[0]
    import copy

    cfg = copy.deepcopy(model.generation_config)
    cfg.update(do_sample=True, **knobs)
    return cfg


def sampling_warpers(cfg, device: torch.device | str = "cpu") -> LogitsProcessorList:
    """The warpers HF's ``_get_logits_processor`` (transformers 5.23) appends when sampling one
    sequence, in its order: temperature, top-h, top-k, top-p, min-p, typical, epsilon, eta."""
    out = LogitsProcessorList()
    if cfg.temperature is not None and cfg.temperature != 1.0:
        out.append(lp.TemperatureLogitsWarper(cfg.temperature))
    if getattr(cfg, "top_h", None) is not None:
        out.append(lp.TopHLogitsWarper(top_h=cfg.top_h))
    if cfg.top_k is not None and cfg.top_k != 0:
        out.append(lp.TopKLogitsWarper(top_k=cfg.top_k, min_tokens_to_keep=1))
    if cfg.top_p is not None and cfg.top_p < 1.0:
        out.append(lp.TopPLogitsWarper(top_p=cfg.top_p, min_tokens_to_keep=1))
    if cfg.min_p is not None:
        out.append(lp.MinPLogitsWarper(min_p=cfg.min_p, min_tokens_to_keep=1))
    if cfg.typical_p is not None and cfg.typical_p < 1.0:
        out.append(lp.TypicalLogitsWarper(mass=cfg.typical_p, min_tokens_to_keep=1))
    if cfg.epsilon_cutoff is not None and 0.0 < cfg.epsilon_cutoff < 1.0:
        out.append(lp.EpsilonLogitsWarper(epsilon=cfg.epsilon_cutoff, min_tokens_to_keep=1))
    if cfg.eta_cutoff is not None and 0.0 < cfg.eta_cutoff < 1.0:
        out.append(lp.EtaLogitsWarper(epsilon=cfg.eta_cutoff, min_tokens_to_keep=1, device=str(device)))
    return out


class SeededRowSampler(LogitsProcessor):
    """Last logits processor of a greedy ``generate``: draws each row's token from the row's
    own generator and leaves it the only finite score."""

    def __init__(self, seeds: list[int], warpers: LogitsProcessorList, device: torch.device):
        self.generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]
        self.warpers = warpers

    def keep(self, rows: list[int]) -> None:
        """Go on with these rows only (their generators keep their state)."""
        self.generators = [self.generators[r] for r in rows]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        warped = self.warpers(input_ids, scores)
        drawn = [
            torch.multinomial(torch.softmax(warped[r : r + 1], dim=-1), num_samples=1, generator=g)
            for r, g in enumerate(self.generators)
        ]
        out = torch.full_like(warped, float("-inf"))
        return cast(torch.FloatTensor, out.scatter_(1, torch.cat(drawn), 0.0))


# --- one prefill per distinct prompt ------------------------------------------------------------------


def _shared_prefill(lm, context_enc: torch.Tensor, attn_masks: torch.Tensor) -> dict:
    """``{"past_key_values": cache}`` holding every row's context but its last token, computed
    once per distinct (padded) context and gathered to the rows; ``{}`` when the rows are all
    distinct or the model's cache cannot be gathered (generate then prefills every row)."""
    from transformers import DynamicCache

    keys = [tuple(row) for row in context_enc.tolist()]
    slot: dict[tuple, int] = {}
    for k in keys:
        slot.setdefault(k, len(slot))
    if len(slot) == len(keys) or context_enc.shape[1] < 2 or lm.model.generation_config.cache_implementation:
        return {}
    distinct = torch.tensor([keys.index(k) for k in slot], device=context_enc.device)
    index = torch.tensor([slot[k] for k in keys], device=context_enc.device)
    ids, mask = context_enc[distinct, :-1], attn_masks[distinct, :-1]
    accepts = inspect.signature(lm.model.forward).parameters
    extra: dict[str, Any] = {"logits_to_keep": 1} if "logits_to_keep" in accepts else {}
    if "position_ids" in accepts:  # as generate derives them for left-padded rows
        extra["position_ids"] = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    with (
        torch.no_grad(),
        torch.autocast(
            device_type=lm.device.type, dtype=lm.mixed_precision_dtype, enabled=lm.mixed_precision_dtype is not None
        ),
    ):
        cache = lm.model(input_ids=ids, attention_mask=mask, use_cache=True, **extra).past_key_values
    if not isinstance(cache, DynamicCache):
        return {}
    return {"past_key_values": _gather(cache, index)}
