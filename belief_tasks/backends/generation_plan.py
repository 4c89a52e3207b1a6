"""How ``hf-shared`` groups ``generate_until`` requests: a plan, computed without a model.

Pure (no torch, no model): requests in, groups out, so the grouping is tested by hand.

* Requests with the same prompt, effective stop strings and ``max_gen_toks`` form one
  :class:`DecodeGroup` when at least one of them samples: the prompt is prefilled once and
  all its rows are decoded as one batch. Greedy requests are deterministic, so identical
  greedy requests (same prompt, same kwargs) share one row; every sample is its own row,
  with its own seed.
* Greedy requests whose prompt has no samples, and requests with generation kwargs our
  decoder does not implement, go to stock generation (``stock``): one request per distinct
  (prompt, kwargs), its text copied to the duplicates.
* The groups are decoded in batches of several groups (``decode_batches``): one forward per
  step for the rows of many prompts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from belief_tasks.facts.seeding import derive_seed
from belief_tasks.hooks.lm_eval_api import handle_stop_sequences, normalize_gen_kwargs
from belief_tasks.requests import effective_stops

#: generation kwargs our decoder implements; any other one sends its requests to stock generation.
SAMPLING_KWARGS = frozenset({"do_sample", "temperature", "top_k", "top_p", "min_p"})


@dataclass(frozen=True)
class Row:
    """One decoding row: a greedy request (with its duplicates) or one sample."""

    requests: tuple[int, ...]  # indices into the request list that get this row's text
    do_sample: bool
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    seed: int = 0


@dataclass
class DecodeGroup:
    """Rows decoded together on one prefill of ``context``."""

    context: str
    until: list[str]
    max_gen: int
    rows: list[Row] = field(default_factory=list)


@dataclass
class GenerationPlan:
    stock: list[list[int]]  # per distinct (context, kwargs): its request indices (stock generates the first)
    groups: list[DecodeGroup]


@dataclass(frozen=True)
class SamplingDefaults:
    """What a sampled request without its own setting gets (the model's generation config)."""

    top_k: int | None = 50
    top_p: float | None = None


def kwargs_key(gen_kwargs: dict) -> str:
    return json.dumps(gen_kwargs, sort_keys=True, default=str)


def sampled_row(index: int, kwargs: dict, seed: int, defaults: SamplingDefaults) -> Row:
    """The row of one sample (``kwargs``: normalised, without until/max_gen_toks/seed)."""
    top_k = kwargs.get("top_k", defaults.top_k)
    top_p = kwargs.get("top_p", defaults.top_p)
    return Row(
        (index,),
        do_sample=True,
        temperature=float(kwargs.get("temperature", 1.0) or 1.0),
        top_k=int(top_k) if top_k else None,
        top_p=float(top_p) if top_p is not None and float(top_p) < 1.0 else None,
        min_p=float(kwargs["min_p"]) if kwargs.get("min_p") else None,
        seed=seed,
    )


def plan_generation(
    requests: Sequence[Any],
    *,
    eos: str | None,
    max_gen_toks: int,
    sample_seed: int,
    defaults: SamplingDefaults = SamplingDefaults(),
) -> GenerationPlan:
    """Group ``requests`` (lm-eval Instances: ``args = (context, gen_kwargs)``, ``task_name``,
    ``doc_id``, ``idx``; a request object listed k times is k samples, as lm-eval repeats them).

    A sample's seed is its own ``seed`` kwarg, else derived from (``sample_seed``, task, doc,
    request index, occurrence, context, kwargs): independent of batching and sharding."""
    stock: dict[tuple[str, str], list[int]] = {}
    groups: dict[tuple[str, int, str], DecodeGroup] = {}
    greedy: dict[tuple[str, str], int] = {}  # (context, kwargs) -> its row's slot in its group
    occurrence: dict[int, int] = {}  # id(request) -> samples seen
    for i, req in enumerate(requests):
        context, gen_kwargs = req.args
        key = kwargs_key(gen_kwargs)
        kwargs = normalize_gen_kwargs(gen_kwargs, max_gen_toks)
        until = effective_stops(handle_stop_sequences(kwargs.pop("until", None), eos=eos))
        max_gen = kwargs.pop("max_gen_toks")
        own_seed = kwargs.pop("seed", None)
        if set(kwargs) - SAMPLING_KWARGS:  # e.g. max_length, repetition_penalty: stock handles those
            stock.setdefault((context, key), []).append(i)
            continue
        group = groups.setdefault((context, max_gen, json.dumps(until)), DecodeGroup(context, until, max_gen))
        if not kwargs.get("do_sample"):  # deterministic: duplicates share one row
            slot = greedy.setdefault((context, key), len(group.rows))
            if slot == len(group.rows):
                group.rows.append(Row((i,), do_sample=False))
            else:
                group.rows[slot] = Row(group.rows[slot].requests + (i,), do_sample=False)
            continue
        k = occurrence[id(req)] = occurrence.get(id(req), -1) + 1
        seed = (
            int(own_seed)
            if own_seed is not None
            else derive_seed(sample_seed, req.task_name, req.doc_id, req.idx, k, context, key)
        )
        group.rows.append(sampled_row(i, kwargs, seed, defaults))
    return _finish(stock, list(groups.values()), requests)


def _finish(stock: dict[tuple[str, str], list[int]], groups: list[DecodeGroup], requests) -> GenerationPlan:
    """Prompts without samples go to stock batched generation (identical to ``hf``)."""
    decoded = []
    for group in groups:
        if any(row.do_sample for row in group.rows):
            decoded.append(group)
            continue
        for row in group.rows:
            context, gen_kwargs = requests[row.requests[0]].args
            stock.setdefault((context, kwargs_key(gen_kwargs)), []).extend(row.requests)
    return GenerationPlan(list(stock.values()), decoded)


def decode_batches(groups: Sequence[DecodeGroup], max_rows: int) -> list[list[tuple[DecodeGroup, list[Row]]]]:
    """The decoding batches: rows of several groups (several prompts) decode together, at most ``max_rows`` per
    batch. Groups keep their order and stay whole where they fit (each piece of a group is one more prefill of
    its prompt); a group of more than ``max_rows`` rows goes in pieces of ``max_rows``."""
    batches: list[list[tuple[DecodeGroup, list[Row]]]] = []
    current: list[tuple[DecodeGroup, list[Row]]] = []
    n = 0
    for group in groups:
        for lo in range(0, len(group.rows), max_rows):
            piece = group.rows[lo : lo + max_rows]
            if current and n + len(piece) > max_rows:
                batches.append(current)
                current, n = [], 0
            current.append((group, piece))
            n += len(piece)
    if current:
        batches.append(current)
    return batches
