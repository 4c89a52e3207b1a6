"""MONITOR's subword units: how a fact's gold object is cut, asked for and read back.

The anchors of eqs. 1-3 are per-subword probabilities P(o_l | prompt, o_<l) of the gold object
under the evaluated model's tokenizer. ``plan`` cuts the answer ``" " + object`` into units
that re-tokenise exactly under every anchor prompt of the fact (``belief_tasks.prompts.monitor``
checks each cut; the units are shared, so all anchors of a fact have the same L_c).
``scoring_requests`` asks a backend for them, by one of two routes, and ``unit_probabilities``
turns the answers back into one probability per unit and anchor:

* ``prefix`` (any backend with ``loglikelihood``; exact on ``hf``): one request per unit on
  growing prefixes (context = prompt + the units before it);
* ``per_token``: one ``per_token_loglikelihood`` request per anchor (``hf-shared``), its
  per-token log-probabilities summed per unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from belief_tasks.options import ModelArgs, parse_options
from belief_tasks.prompts import monitor as monitor_prompts
from belief_tasks.requests import PER_TOKEN_LOGLIKELIHOOD
from belief_tasks.tasks.base import model_tokenizer, unpack

#: why MONITOR needs the model's tokenizer, for ``model_tokenizer``'s errors
NEEDED_FOR = (
    "MONITOR (it scores the gold object subword by subword, P(o_l | prompt, o_<l), so it needs per-token "
    "probabilities of a given answer: backends that only generate text, such as chat APIs, cannot run it)"
)


class Codec:
    """The evaluated model's tokenizer, encoding as lm-eval's ``hf`` backend does (``tok_encode``, ``prefix_token_id``:
    ``prompts.monitor.Encoder``)."""

    def __init__(self, metadata: Mapping[str, Any] | None):
        self.tokenizer = model_tokenizer(metadata, needed_for=NEEDED_FOR)
        # lm-eval's hf passes add_special_tokens only when add_bos_token is given in the model args
        bos = parse_options(ModelArgs, metadata).add_bos_token
        self.special = {} if bos is None else {"add_special_tokens": bos}

    @property
    def prefix_token_id(self) -> int:
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    def encode(self, strings) -> list[list[int]]:
        return self.tokenizer(list(strings), **self.special)["input_ids"]

    def tok_encode(self, string: str, add_special_tokens: bool | None = None) -> list[int]:
        special = self.special if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer([string], **special)["input_ids"][0]

    def candidates(self, prompt: str, answer: str) -> list[int] | None:
        """Token end offsets inside the answer (and their neighbours); None: try every offset."""
        if not getattr(self.tokenizer, "is_fast", False):
            return None
        spans = self.tokenizer(prompt + answer, return_offsets_mapping=True, **self.special)["offset_mapping"]
        ends = {end - len(prompt) for _, end in spans if end > len(prompt)}
        return sorted({e + d for e in ends for d in (-1, 0, 1)})

    def generation_tokens(self, prompts: list[str], outputs: list[str]) -> int:
        """Tokens of greedy requests: each prompt as the backend encodes it, plus the tokens of the text it
        returned (re-encoded; the stop sequence the backend cut off is not counted)."""
        if not prompts:
            return 0
        generated = self.tokenizer(list(outputs), add_special_tokens=False)["input_ids"]
        return sum(map(len, self.encode(prompts))) + sum(map(len, generated))


@dataclass(frozen=True)
class Plan:
    """One fact's units: ``answer`` cut at ``cuts`` (character offsets, first 0, last len(answer))."""

    answer: str  # " " + object
    anchors: list  # the doc's anchors: {"key", "kind", "text"}
    cuts: list
    counts: list  # per anchor, the model tokens of each unit
    n_tokens: list  # per anchor, the model tokens of the answer
    context_tokens: list  # per anchor, the model tokens of its prompt (lm-eval's pairing)

    @property
    def units(self) -> list[str]:
        return [self.answer[a:b] for a, b in zip(self.cuts, self.cuts[1:])]


def plan(doc: Mapping[str, Any], codec: Codec) -> Plan:
    """The subword units of a fact's answer, shared by all its anchors, and each anchor's token counts."""
    answer = " " + doc["object"]
    anchors = unpack(doc, "anchors")
    pieces = [
        monitor_prompts.exact_cuts(codec, a["text"], answer, codec.candidates(a["text"], answer)) for a in anchors
    ]
    cuts = monitor_prompts.subword_units(pieces, answer)
    return Plan(
        answer,
        anchors,
        cuts,
        [monitor_prompts.unit_token_counts(p, cuts) for p in pieces],
        [len(p.answer_ids) for p in pieces],
        [len(p.context_ids) for p in pieces],
    )


def scoring_requests(pl: Plan, route: str) -> list[tuple[str, tuple]]:
    """(request type, arguments) of every anchor's unit probabilities, anchors in order."""
    out: list[tuple[str, tuple]] = []
    for a in pl.anchors:
        if route == "prefix":
            out += [("loglikelihood", args) for args in monitor_prompts.prefix_requests(a["text"], pl.answer, pl.cuts)]
        else:
            out.append((PER_TOKEN_LOGLIKELIHOOD, (a["text"], pl.answer)))
    return out


def n_scoring_requests(pl: Plan, route: str) -> int:
    return sum(len(c) for c in pl.counts) if route == "prefix" else len(pl.anchors)


def scoring_tokens(pl: Plan, route: str) -> int:
    """Tokens the scoring requests hold (context + continuation, as the backend pairs them): per ``prefix``
    request the prompt and the answer up to its unit; per ``per_token`` request the prompt and the answer."""
    if route == "prefix":
        return sum(
            ctx + sum(counts[: k + 1]) for ctx, counts in zip(pl.context_tokens, pl.counts) for k in range(len(counts))
        )
    return sum(ctx + n for ctx, n in zip(pl.context_tokens, pl.n_tokens))


def unit_probabilities(results: list, pl: Plan, route: str) -> list[list[float]]:
    """Per anchor, the probability of each unit, from the scoring results in request order."""
    probs, i = [], 0
    for counts, n_tokens in zip(pl.counts, pl.n_tokens):
        if route == "prefix":
            lls = [float(r[0]) for r in results[i : i + len(counts)]]
            i += len(counts)
        else:
            tokens = [float(x) for x in results[i]]
            i += 1
            if len(tokens) != n_tokens:
                raise ValueError(
                    f"{PER_TOKEN_LOGLIKELIHOOD} returned {len(tokens)} log-probs for an answer the model's tokenizer "
                    f"splits into {n_tokens} tokens: the backend tokenises differently from tokenizer=/pretrained="
                )
            starts = [sum(counts[:k]) for k in range(len(counts))]
            lls = [sum(tokens[s : s + c]) for s, c in zip(starts, counts)]
        probs.append([math.exp(x) for x in lls])
    return probs
