"""What a command's tasks ask of the model, counted before it loads: facts, requests by kind, tokens.

``count_task`` reads a built task's requests (``Task.instances``, as lm-eval builds them) and counts, per
request kind (``KINDS``):

* requests (``repeats`` included);
* **tokens to compute without prefix sharing**: what a backend that forwards every request as its own row
  reads (lm-eval's ``hf`` and ``vllm``): a log-likelihood's context + continuation - 1 tokens (the last is
  predicted, never read), a generation's prompt tokens;
* **tokens to compute with prefix sharing**: a log-likelihood call's token sequences as the backend shares them:
  on ``hf-shared`` the radix tree of ``backends.prefix_tree`` (each shared segment once, ``TREE``); on
  ``vllm-shared`` and ``vllm-serve-shared`` the passes of ``backends.prefix_cache_plan`` at the engine's block
  size (each context's whole blocks once, then each request's tail past them and its continuation, and what the
  cache rules make it compute again: ``BLOCKS``); a generation's prompts once per distinct prompt (greedy answer
  and samples of one prompt share it);
* generated tokens: at most ``max_gen_toks`` per generation (an upper bound: answers stop at their line end).

Tokens are counted with the evaluated model's tokenizer as lm-eval's ``hf`` encodes a request
(``TemplateLM._encode_pair``: a context's trailing space moves to the continuation; an empty context is the
model's prefix token: ``requests.encode_request``, over ``Encoder``), cut at the model's ``max_length`` as the
backend cuts it. Each distinct string is tokenised once, in batches.

``shared_facts`` counts, from the documents alone, the facts two tasks can join for the report's agreement
between probes (``facts.join``: the same fact id within one dataset, the cross-dataset key across datasets).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from belief_tasks.backends.prefix_cache_plan import simulate
from belief_tasks.backends.prefix_tree import CPU_FORWARD_TOKENS, build_prefix_tree, tree_cost
from belief_tasks.planning.rates import BLOCKS, TREE
from belief_tasks.requests import RequestEncoder, is_seeded_sample, strings_to_encode

LOGLIKELIHOOD = "loglikelihood"
#: instances counted at a time (their request tokens held for that long)
COUNT_CHUNK = 4096
PER_TOKEN = "per_token_loglikelihood"
GREEDY = "generate_until (greedy)"
SAMPLED = "generate_until (sampled)"
#: request kinds in the order they are printed; another request type keeps its own name
KINDS = (LOGLIKELIHOOD, PER_TOKEN, GREEDY, SAMPLED)
#: rows up to this many tokens are planned as one tree (exactly hf-shared's plan); larger ones in two levels
EXACT_TOKENS = 2_000_000


@dataclass
class KindCost:
    """One request kind of one task."""

    requests: int = 0
    tokens: int = 0  # to compute without prefix sharing
    shared_tokens: int = 0  # to compute with prefix sharing (hf-shared's plan)
    generated: int = 0  # generated tokens, an upper bound (max_gen_toks per generation)
    prompts: int = 0  # distinct generation prompts

    def as_dict(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "tokens": self.tokens,
            "shared_tokens": self.shared_tokens,
            "generated": self.generated,
            "prompts": self.prompts,
        }


@dataclass
class TaskCost:
    """What one task asks: its family, facts, documents and per request kind its ``KindCost``."""

    task: str
    family: str
    facts: int
    docs: int
    kinds: dict[str, KindCost] = field(default_factory=dict)
    keys: dict[str, Any] = field(default_factory=dict)  # fact id -> its cross-dataset key (record form)
    dataset: str = ""

    @property
    def requests(self) -> int:
        return sum(k.requests for k in self.kinds.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "family": self.family,
            "dataset": self.dataset,
            "facts": self.facts,
            "docs": self.docs,
            "kinds": {k: v.as_dict() for k, v in self.kinds.items()},
        }


class Encoder:
    """A request's tokens as lm-eval's ``hf`` encodes it, from the tokenizer alone (no model). Strings are
    encoded in batches through the fast tokenizer's own ``encode_batch`` where there is one (transformers'
    per-call overhead was most of the counting time), each distinct string once."""

    def __init__(self, tokenizer, max_length: int, add_bos_token: bool = False):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.add_bos_token = add_bos_token
        bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
        self.prefix_token_id = bos if bos is not None else eos
        self._fast = _own_copy(getattr(tokenizer, "backend_tokenizer", None))
        self._memo: dict[tuple[str, bool], list[int]] = {}
        self._requests = RequestEncoder(self)

    def encode_many(self, texts: Iterable[str], special: bool | None = None) -> None:
        """Encode ``texts`` (those not encoded yet) into the memo."""
        flag = self.add_bos_token if special is None else special
        todo = list(dict.fromkeys(t for t in texts if (t, flag) not in self._memo))
        if not todo:
            return
        if self._fast is not None:
            for lo in range(0, len(todo), 4096):
                chunk = todo[lo : lo + 4096]
                for text, enc in zip(chunk, self._fast.encode_batch(chunk, add_special_tokens=flag)):
                    self._memo[(text, flag)] = enc.ids
        else:
            for text in todo:
                self._memo[(text, flag)] = self.tokenizer.encode(text, add_special_tokens=flag)

    def encode(self, text: str, special: bool | None = None) -> list[int]:
        flag = self.add_bos_token if special is None else special
        if (text, flag) not in self._memo:
            self.encode_many([text], flag)
        return self._memo[(text, flag)]

    def context(self, text: str) -> list[int]:
        """A context's tokens (encoded once: many requests share one context)."""
        return self.encode(text)

    def tok_encode(self, string: str, add_special_tokens: bool | None = None) -> list[int]:
        """``requests.Tokenizes``: as ``encode``, from the memo."""
        return self.encode(string, add_special_tokens)

    def prepare(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, bool]]:
        """Encode, in batches, everything ``pair`` will need for these (context, continuation) pairs, in order
        (``requests.strings_to_encode``). Returns the memo's keys of what is not a context (the requests' own
        strings), for ``forget``."""
        contexts, wholes, bare = strings_to_encode(pairs)
        self.encode_many(contexts)
        self.encode_many(wholes)
        self.encode_many(bare, special=False)
        return [(t, self.add_bos_token) for t in wholes] + [(t, False) for t in bare]

    def forget(self, keys: Iterable[tuple[str, bool]]) -> None:
        """Drop these memo entries (``prepare``'s): a request's whole tokens are read once, and kept they would
        hold every context once per option (IC-LKE: 100 copies of a 50-example context per fact)."""
        for k in keys:
            self._memo.pop(k, None)

    def pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context tokens, continuation tokens) of a log-likelihood request (``requests.encode_request``), in the
        order ``prepare`` was given them (``requests.RequestEncoder``: a shared context is cut once)."""
        return self._requests(context, continuation)

    def input_row(self, ctx: list[int], cont: list[int]) -> tuple[list[int], int]:
        """The tokens forwarded for a log-likelihood of these (context, continuation) tokens (``pair``),
        (context + continuation)[:-1] cut to ``max_length`` as the backend cuts it, and how many of them are the
        context's."""
        whole = ctx + cont
        row = whole[-(self.max_length + 1) :][:-1]
        return row, max(0, len(ctx) - (len(whole) - 1 - len(row)))


def _own_copy(fast):
    """A copy of a fast tokenizer without padding or truncation: transformers switches both on the shared one for
    a batch call (lm-eval's ``tok_batch_encode`` pads to the longest) and leaves them for its next call to reset,
    which ``encode_batch`` would otherwise inherit."""
    if fast is None:
        return None
    from tokenizers import Tokenizer

    own = Tokenizer.from_str(fast.to_str())
    own.no_padding()
    own.no_truncation()
    return own


def _kind(inst) -> str:
    if inst.request_type == "generate_until":
        kwargs = inst.args[1] if len(inst.args) > 1 and isinstance(inst.args[1], dict) else {}
        return SAMPLED if is_seeded_sample(inst.args) or kwargs.get("do_sample") else GREEDY
    return inst.request_type


def _max_gen_toks(kwargs: Mapping[str, Any] | None, default: int = 256) -> int:
    kwargs = kwargs or {}
    for key in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens"):
        if kwargs.get(key) is not None:
            return int(kwargs[key])
    return default


def count_instances(
    instances: Sequence, encoder: Encoder, sharing: str | None = TREE, block_size: int = 16
) -> dict[str, KindCost]:
    """Per request kind, the ``KindCost`` of ``instances`` (lm-eval ``Instance`` objects); ``sharing``: how the
    backend shares a log-likelihood call's prefixes (``TREE``, ``BLOCKS`` of ``block_size`` tokens, or None)."""
    out: dict[str, KindCost] = {}
    rows: dict[str, dict[str, list[list[int]]]] = {}  # kind -> context -> continuation inputs (the tree)
    contexts: dict[str, dict[str, int]] = {}  # kind -> context -> its tokens
    pairs: dict[str, dict[str, list[tuple[list[int], list[int]]]]] = {}  # kind -> context -> tokens (blocks)
    prompts: dict[str, dict[str, int]] = {}  # generation kind -> prompt -> tokens
    for lo in range(0, len(instances), COUNT_CHUNK):  # a chunk's request tokens at a time: memory follows the chunk
        part = instances[lo : lo + COUNT_CHUNK]
        own = encoder.prepare(inst.args[:2] for inst in part if inst.request_type in (LOGLIKELIHOOD, PER_TOKEN))
        gen = [inst.args[0] for inst in part if inst.request_type == "generate_until"]
        encoder.encode_many(gen)
        _count_part(part, encoder, sharing, out, rows, contexts, pairs, prompts)
        encoder.forget(own)
        encoder.forget((prompt, encoder.add_bos_token) for prompt in gen)  # a prompt's count is kept, not its tokens
    shared_prompts(out, prompts)
    for kind in contexts:
        out[kind].shared_tokens = 0
    for kind, by_context in rows.items():
        out[kind].shared_tokens = shared_tokens(by_context, contexts[kind], encoder)
    for kind, by_pairs in pairs.items():
        out[kind].shared_tokens = block_tokens(by_pairs, encoder.max_length, block_size)
    return out


def _count_part(part: Sequence, encoder: Encoder, sharing: str | None, out, rows, contexts, pairs, prompts) -> None:
    """``count_instances``' tally of one chunk of instances into its accumulators."""
    for inst in part:
        kind = _kind(inst)
        cost = out.setdefault(kind, KindCost())
        n = int(getattr(inst, "repeats", 1) or 1)
        cost.requests += n
        if inst.request_type in (LOGLIKELIHOOD, PER_TOKEN):
            context, continuation = inst.args[0], inst.args[1]
            pair = encoder.pair(context, continuation)
            row, n_ctx = encoder.input_row(*pair)
            cost.tokens += n * len(row)
            contexts.setdefault(kind, {})[context] = n_ctx
            if sharing == TREE:
                rows.setdefault(kind, {}).setdefault(context, []).extend([row[n_ctx:]] * n)
            elif sharing == BLOCKS:
                pairs.setdefault(kind, {}).setdefault(context, []).extend([pair] * n)
        elif inst.request_type == "generate_until":
            kwargs = inst.args[1] if len(inst.args) > 1 and isinstance(inst.args[1], dict) else {}
            new = _max_gen_toks(kwargs)
            tokens = (
                len(encoder.context(inst.args[0])[-(encoder.max_length - new) :]) if new < encoder.max_length else 0
            )
            cost.tokens += n * tokens
            cost.generated += n * new
            prompts.setdefault(kind, {})[inst.args[0]] = tokens


def shared_prompts(out: dict[str, KindCost], prompts: Mapping[str, Mapping[str, int]]) -> None:
    """Generation prompts prefilled once per distinct prompt; greedy answers and samples of one prompt are
    prefilled once between them (hf-shared's generation plan)."""
    for kind, by_prompt in prompts.items():
        out[kind].prompts = len(by_prompt)
        out[kind].shared_tokens = sum(by_prompt.values())
    if GREEDY in prompts and SAMPLED in prompts:
        both = set(prompts[GREEDY]) & set(prompts[SAMPLED])
        out[SAMPLED].shared_tokens -= sum(prompts[SAMPLED][p] for p in both)


def block_tokens(by_context: Mapping[str, list[tuple[list[int], list[int]]]], max_length: int, block_size: int) -> int:
    """Tokens vLLM computes for these log-likelihood requests, (context, continuation) tokens each, sent in
    ``vllm-shared``'s passes (``prefix_cache_plan.simulate``: its plan and vLLM's cache rules) after lm-eval's cut
    (``max_length - 1`` tokens from the left). Up to ``EXACT_TOKENS`` tokens of requests, one plan of all of
    them, exactly the backend's (without eviction); above, one plan per run of contexts of about ``EXACT_TOKENS``
    / 8 tokens in turn, on one cache, so that no more than those are held at once (docs/profile.md)."""
    keep, chunk = max_length - 1, max(1, EXACT_TOKENS // 8)
    cached: set[int] = set()
    computed = 0
    seqs: list[list[int]] = []
    ctxlens: list[int] = []
    size = sum(len(ctx) + len(cont) for pairs in by_context.values() for ctx, cont in pairs)
    for pairs in by_context.values():
        seqs += [(ctx + cont)[-keep:] for ctx, cont in pairs]
        ctxlens += [len(ctx) - max(0, len(ctx) + len(cont) - keep) for ctx, cont in pairs]
        if size > EXACT_TOKENS and sum(map(len, seqs)) >= chunk:
            computed += simulate(seqs, ctxlens, block_size, cached=cached).computed_tokens
            seqs, ctxlens = [], []
    return computed + (simulate(seqs, ctxlens, block_size, cached=cached).computed_tokens if seqs else 0)


def shared_tokens(
    by_context: Mapping[str, list[list[int]]], context_tokens: Mapping[str, int], encoder: Encoder
) -> int:
    """Tokens hf-shared forwards for these log-likelihood rows: its radix tree (``build_prefix_tree``, its cost
    ``tree_cost``) over the whole rows, exactly its plan. Where the rows hold more than ``EXACT_TOKENS`` tokens
    (IC-LKE's long contexts, once per option), the tree is planned in two levels instead, the distinct contexts
    and then each context's continuations, so that a context is held once, not once per option: within a few
    tenths of a percent of the one tree (docs/profile.md)."""
    names = list(by_context)
    contexts = [encoder.pair(c, "")[0][-context_tokens[c] :] if context_tokens[c] else [] for c in names]
    size = sum(len(ctx) * len(by_context[n]) + sum(map(len, by_context[n])) for ctx, n in zip(contexts, names))
    if size <= EXACT_TOKENS:
        rows = [ctx + rest for ctx, n in zip(contexts, names) for rest in by_context[n]]
        return tree_cost(build_prefix_tree(rows, min_saving=CPU_FORWARD_TOKENS), rows)
    top = tree_cost(build_prefix_tree(contexts, min_saving=CPU_FORWARD_TOKENS), contexts) if any(contexts) else 0
    below = 0
    for name in names:
        rest = by_context[name]
        below += tree_cost(build_prefix_tree(rest, min_saving=CPU_FORWARD_TOKENS), rest)
    return top + below


def task_facts(docs: Iterable[Mapping[str, Any]]) -> tuple[int, dict[str, Any]]:
    """(distinct facts, fact id -> its cross-dataset key record) of a task's documents."""
    import json

    keys: dict[str, Any] = {}
    n = 0
    seen = set()
    for doc in docs:
        fid = doc.get("fact_id")
        if fid in (None, ""):
            n += 1
            continue
        if fid not in seen:
            seen.add(fid)
            key = doc.get("fact_key")
            keys[fid] = json.loads(key) if isinstance(key, str) else key
    return n + len(seen), keys


def count_task(task, encoder: Encoder, family: str = "", sharing: str | None = TREE, block_size: int = 16) -> TaskCost:
    """A built task's ``TaskCost`` (its requests must be built: ``build_all_requests``)."""
    docs = list(task.eval_docs)
    facts, keys = task_facts(docs)
    dataset = (getattr(task.config, "metadata", None) or {}).get("dataset") or ""
    kinds = count_instances(task.instances, encoder, sharing, block_size)
    return TaskCost(task.config.task, family, facts, len(docs), kinds, keys, dataset)


def shared_facts(costs: Sequence[TaskCost]) -> list[tuple[str, str, int]]:
    """(task A, task B, facts they can join) for each pair of tasks whose documents carry fact keys: by fact id
    within one dataset, on the cross-dataset key across datasets (``facts.join``), as the report joins them."""
    from belief_tasks.facts.join import join_keys, join_same_dataset
    from belief_tasks.facts.schema import FactKey

    keyed = [c for c in costs if c.keys and all(v is not None for v in c.keys.values())]
    as_keys = {c.task: {fid: FactKey.from_record(k) for fid, k in c.keys.items()} for c in keyed}
    out = []
    for i, a in enumerate(keyed):
        for b in keyed[i + 1 :]:
            same = a.dataset and a.dataset == b.dataset
            join = join_same_dataset(a.keys, b.keys) if same else join_keys(as_keys[a.task], as_keys[b.task])
            out.append((a.task, b.task, len(join.joined)))
    return out


def totals(costs: Iterable[TaskCost]) -> dict[str, KindCost]:
    """Per request kind, the sum over tasks."""
    out: dict[str, KindCost] = {}
    for c in costs:
        for kind, k in c.kinds.items():
            t = out.setdefault(kind, KindCost())
            for name in ("requests", "tokens", "shared_tokens", "generated", "prompts"):
                setattr(t, name, getattr(t, name) + getattr(k, name))
    return out


def combined(kinds: Mapping[str, KindCost]) -> dict[str, int]:
    """The ``KindCost`` fields summed over request kinds (what ``rates.units`` reads)."""
    return {
        name: sum(getattr(k, name) for k in kinds.values())
        for name in ("requests", "tokens", "shared_tokens", "generated")
    }


def by_kind_order(kinds: Iterable[str]) -> list[str]:
    """Request kinds in print order (``KINDS`` first, others after, by name)."""
    kinds = list(kinds)
    return [k for k in KINDS if k in kinds] + sorted(k for k in kinds if k not in KINDS)
