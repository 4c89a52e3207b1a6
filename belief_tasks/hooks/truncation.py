"""Requests longer than the model's context: counted per task, refused where a probe needs its whole context.

lm-eval's ``hf`` backend (and ``hf-shared`` and ``hf-mlm``, which cut as it does) keeps the last
``max_length`` tokens of a request that does not fit and only logs a warning, so a probe may score
something other than what it sent. Every task of ours measures its requests with the evaluated
model's tokenizer as soon as they are built, before the model scores anything (``BeliefTask``,
with the model that ``harness`` exposes for the run):

* when a request is cut, the task's ``metadata`` in the results JSON gets a ``truncation`` entry
  (``Truncation.record``), which ``belief-report`` shows;
* a task whose definition needs its whole context (``BeliefTask.WHOLE_CONTEXT`` says what would be
  lost: IC-LKE's demonstrations, BELIEF-ICL's few-shot context) raises ``TruncationError`` instead,
  unless the ``allow_truncation`` knob accepts the cut (``belief-eval`` prints it and exits 2).

A request's length is what the model must hold at once, so it is cut by ``length - max_length``:

* ``loglikelihood`` / ``per_token_loglikelihood`` (causal): context + continuation - 1 tokens
  (the last token is predicted, never read); lm-eval keeps the last ``max_length + 1``;
* ``generate_until`` (causal): context + ``max_gen_toks`` tokens; lm-eval keeps the last
  ``max_length - max_gen_toks`` context tokens;
* ``hf-mlm`` (``loglikelihood``, ``loglikelihood_span``, ``mask_topk``): the text's tokens with the
  special ones (``HFMaskedLM.request_tokens``);
* ``loglikelihood_rolling`` is scored in windows and never cut.

The same rule holds on lm-eval's other causal backends, each against the limit it cuts at (``Context``):

* ``vllm``: its ``max_length`` (``max_model_len``, the engine's own unless given); a log-likelihood needs
  context + continuation + 1 tokens (vLLM generates one token), a generation context + ``max_gen_toks``;
* API models (``local-completions``, ...): lm-eval cuts at the ``max_length`` of ``--model_args`` (its
  default 2048 when none is given), counted with the model's tokenizer (``tokenizer`` /
  ``tokenizer_backend``); a log-likelihood holds context + continuation + 1 tokens, a generation context +
  ``max_gen_toks`` + 1 (lm-eval keeps one token back). The server's own context, when it reports one
  (``max_model_len`` at ``/v1/models``), is checked too: a request lm-eval leaves longer than it would be
  refused by the server, so the task stops (``ServerContextError``). When the server reports none, or
  lengths cannot be counted (no tokenizer), or the backend is one we do not know, the results JSON says
  so (``unknown``) for every task: nothing passes silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from belief_tasks.hooks.lm_eval_api import kinds_of, model_behind_cache, normalize_gen_kwargs
from belief_tasks.requests import encode_requests

log = logging.getLogger(__name__)

#: the knob that accepts a cut in a probe that needs its whole context (``options.COMMON``)
KNOB = "allow_truncation"


@dataclass(frozen=True)
class Truncation:
    """What the model's context cuts off a task's requests (this rank's, or all ranks' combined)."""

    max_length: int
    requests: int  # requests measured
    truncated: int  # of them, longer than max_length
    longest: int  # tokens of the longest request
    max_cut: int  # most tokens cut off one request
    total_cut: int  # tokens cut off all requests

    def record(self, whole_context: bool, allowed: bool) -> dict[str, Any]:
        """The results JSON's ``configs[task]["metadata"]["truncation"]``."""
        return {
            "max_length": self.max_length,
            "requests": self.requests,
            "truncated_requests": self.truncated,
            "longest_request_tokens": self.longest,
            "max_tokens_cut": self.max_cut,
            "total_tokens_cut": self.total_cut,
            "needs_whole_context": whole_context,
            KNOB: allowed,
        }


def summarize(lengths: Iterable[int], max_length: int) -> Truncation:
    """``Truncation`` of requests of ``lengths`` tokens in a context of ``max_length`` tokens."""
    lengths = list(lengths)
    cuts = [n - max_length for n in lengths if n > max_length]
    return Truncation(max_length, len(lengths), len(cuts), max(lengths, default=0), max(cuts, default=0), sum(cuts))


class TruncationError(ValueError):
    """Requests of a task that needs its whole context are longer than the model's ``max_length``."""

    #: Raised by every process of a launch alike (``all_ranks``): each may wait for the others before it exits.
    EVERY_PROCESS = True

    def __init__(self, task: str, cut: Truncation, lost: str, scored_whole: bool = False):
        self.task, self.cut = task, cut
        if scored_whole:  # BEAR's statements: no cut can run, so allow_truncation is no way out
            super().__init__(
                f"task {task}: {cut.truncated} of {cut.requests} requests are longer than the model's max_length of "
                f"{cut.max_length} tokens (the longest has {cut.longest}, {cut.max_cut} too many). Each is a "
                f"statement scored whole, from its first token, so no backend can cut it (lm-eval's hf stops with an "
                f"AssertionError) and {KNOB} cannot apply. Use a model with a longer context (max_length=... in "
                f"--model_args, up to what the model supports), or leave out the relations or templates with the "
                f"longest statements (the relations and templates knobs)"
            )
            return
        super().__init__(
            f"task {task}: {cut.truncated} of {cut.requests} requests are longer than the model's max_length of "
            f"{cut.max_length} tokens (the longest has {cut.longest}). The backend would cut them from the left (up "
            f"to {cut.max_cut} tokens of a request), removing part of {lost}, so the probe would no longer measure "
            f"what its method defines. Use a model with a longer context (max_length=... in --model_args, up to what "
            f"the model supports), shorten the prompts with the task's knobs, or accept the cut knowingly with "
            f'{{"{KNOB}": true}} in --metadata (the results JSON then records what was cut)'
        )


# --- measuring ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """How a backend counts a request (``measure``: request type, args -> tokens, None for a request it
    never cuts) and the limit it cuts at; ``max_length`` or ``measure`` None when they cannot be known."""

    max_length: int | None
    measure: Callable[[str, list], list] | None
    source: str = ""  # where max_length comes from (recorded for backends other than hf)
    server: int | str | None = None  # API models: the server's reported context, "unknown" when none
    unknown: str = ""  # why the lengths or the limit cannot be known


def context(lm) -> Context | None:
    """``lm``'s ``Context``; None for a model that holds no context (lm-eval's ``dummy``)."""
    lm = model_behind_cache(lm)
    kinds = kinds_of(lm)
    if "dummy" in kinds:
        return None
    if getattr(lm, "request_tokens", None) is not None:  # hf-mlm measures its own
        return Context(int(lm.max_length), lm.request_tokens)
    measure = _hflm_request_tokens(lm)
    if measure is not None:
        return Context(int(lm.max_length), measure)
    if "vllm" in kinds:
        return Context(int(lm.max_length), _vllm_request_tokens(lm), "vllm max_model_len")
    if "api" in kinds:
        return _api_context(lm)
    return Context(
        None,
        None,
        unknown=f"belief-tasks does not know how {type(lm).__name__} counts and cuts a "
        "request, so its requests were not measured against a context length",
    )


def request_lengths(lm, instances: list) -> list[int] | None:
    """Tokens each request of ``instances`` needs in ``lm``'s context (see the module doc), None when
    ``lm``'s backend is not one we can measure. Requests that are never cut are left out."""
    ctx = context(lm)
    return None if ctx is None or ctx.measure is None else _lengths(ctx.measure, instances)


def _lengths(measure: Callable[[str, list], list], instances: list) -> list[int]:
    by_type: dict[str, dict] = {}  # request type -> {hashable args: args}, distinct requests only
    keys = [(inst.request_type, _hashable(inst.args)) for inst in instances]
    for (kind, key), inst in zip(keys, instances):
        by_type.setdefault(kind, {}).setdefault(key, inst.args)
    tokens: dict = {}
    for kind, distinct in by_type.items():
        tokens.update(((kind, key), n) for key, n in zip(distinct, measure(kind, list(distinct.values()))))
    return [tokens[k] for k in keys if tokens[k] is not None]


def _hashable(args) -> tuple:
    return tuple(repr(sorted(a.items())) if isinstance(a, dict) else a for a in args)


#: generation contexts encoded per call (lengths come from the attention mask, so padding does not count)
ENCODE_BATCH = 256


def _hflm_request_tokens(lm) -> Callable[[str, list], list] | None:
    """How lm-eval's ``HFLM`` (and ``hf-shared``) sizes causal requests, or None for other models."""
    from lm_eval.models.huggingface import HFLM

    if not isinstance(lm, HFLM) or lm.backend != "causal":
        return None

    def tokens(request_type: str, args: list[tuple]) -> list[int | None]:
        if request_type in ("loglikelihood", "per_token_loglikelihood"):
            return [n - 1 for n in _pair_tokens(lm, args)]
        if request_type == "generate_until":
            contexts = list(dict.fromkeys(a[0] for a in args))  # samples of a prompt share its context
            n = dict(zip(contexts, _context_tokens(lm, contexts)))
            return [n[a[0]] + normalize_gen_kwargs(dict(a[1]), lm.max_gen_toks)["max_gen_toks"] for a in args]
        return [None] * len(args)

    return tokens


def _context_tokens(lm, contexts: list[str]) -> list[int]:
    """Tokens of each generation context as ``HFLM.generate_until`` encodes it (``tok_batch_encode``)."""
    out = []
    for lo in range(0, len(contexts), ENCODE_BATCH):
        _, mask = lm.tok_batch_encode(contexts[lo : lo + ENCODE_BATCH])
        out += mask.sum(dim=1).tolist()
    return out


def _pair_tokens(lm, args: list[tuple]) -> list[int]:
    """len(context_enc + continuation_enc) of each log-likelihood request, as ``TemplateLM.loglikelihood`` encodes
    them (``requests.encode_requests``)."""
    return [len(ctx) + len(cont) for ctx, cont in encode_requests(lm, (a[:2] for a in args))]


def _vllm_request_tokens(lm) -> Callable[[str, list], list]:
    """How lm-eval's ``VLLM`` sizes requests: a log-likelihood holds context + continuation and the one token
    vLLM must generate (it cuts to ``max_length - 1``); a generation the context (``tok_encode``) and
    ``max_gen_toks`` (``maybe_truncate``)."""

    def tokens(request_type: str, args: list[tuple]) -> list[int | None]:
        if request_type == "loglikelihood":
            return [n + 1 for n in _pair_tokens(lm, args)]
        if request_type == "generate_until":
            contexts = list(dict.fromkeys(a[0] for a in args))
            n = dict(zip(contexts, (len(t) for t in lm.tok_encode(contexts))))
            return [n[a[0]] + lm.modify_gen_kwargs(dict(a[1]), default_max_gen_toks=lm.max_gen_toks)[2] for a in args]
        return [None] * len(args)

    return tokens


#: where an API model's limit comes from (lm-eval's ``TemplateAPI`` keeps ``max_length - 1``)
API_SOURCE = "max_length of --model_args (lm-eval's default 2048 when not given)"


def _api_context(lm) -> Context:
    """lm-eval's ``TemplateAPI`` cuts at ``max_length - 1`` (``lm.max_length``): a log-likelihood's
    context + continuation, a generation's context + ``max_gen_toks`` (only when it sends tokens,
    ``tokenized_requests``; text is sent as it is). Counted here in the user's terms, against the
    ``max_length`` given: one token more each (the token lm-eval keeps back)."""
    server = server_context(lm)
    if getattr(lm, "tokenizer", None) is None:
        return Context(
            None,
            None,
            API_SOURCE,
            server if server is not None else "unknown",
            "the API model has no tokenizer (tokenizer_backend=none), so its requests cannot be counted: "
            "give tokenizer=... or tokenizer_backend=huggingface in --model_args to have them measured",
        )

    def tokens(request_type: str, args: list[tuple]) -> list[int | None]:
        if request_type == "loglikelihood":
            return [n + 1 for n in _pair_tokens(lm, args)]
        if request_type == "generate_until" and lm.tokenized_requests:
            contexts = list(dict.fromkeys(a[0] for a in args))
            n = dict(zip(contexts, (len(t) for t in lm.tok_encode(contexts, add_special_tokens=lm.add_bos_token))))
            return [n[a[0]] + int(a[1].get("max_gen_toks", lm._max_gen_toks)) + 1 for a in args]
        return [None] * len(args)

    return Context(int(lm.max_length) + 1, tokens, API_SOURCE, server if server is not None else "unknown")


def server_context(lm) -> int | None:
    """The context length an OpenAI-style server reports for ``lm``'s model (vLLM: ``max_model_len`` in
    ``GET /v1/models``), None when it reports none or cannot be asked. Asked once per model."""
    if "_belief_server_context" in vars(lm):
        return vars(lm)["_belief_server_context"]
    found = None
    base = (getattr(lm, "base_url", None) or "").rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if base.endswith(suffix):
            import requests

            try:
                answer = requests.get(
                    base[: -len(suffix)] + "/models",
                    headers=lm.header,
                    timeout=10,
                    verify=getattr(lm, "verify_certificate", True),
                )
                answer.raise_for_status()
                models = answer.json().get("data") or []
            except (requests.RequestException, ValueError, AttributeError):
                models = []
            mine = [m for m in models if isinstance(m, dict) and m.get("id") == lm.model]
            mine = mine or (models if len(models) == 1 else [])
            n = mine[0].get("max_model_len") if mine and isinstance(mine[0], dict) else None
            found = n if isinstance(n, int) and n > 0 else None
            break
    vars(lm)["_belief_server_context"] = found
    return found


def all_ranks(cut: Truncation, lm) -> Truncation:
    """``cut`` combined over the processes of a data-parallel launch (every rank gets the same), so that
    all of them record or refuse alike."""
    lm = model_behind_cache(lm)
    if getattr(lm, "world_size", 1) <= 1:
        return cut
    import torch

    mine = torch.tensor([[cut.requests, cut.truncated, cut.longest, cut.max_cut, cut.total_cut]], device=lm.device)
    rows = lm.all_gather(mine).view(-1, 5).cpu().tolist()
    return Truncation(
        cut.max_length,
        sum(r[0] for r in rows),
        sum(r[1] for r in rows),
        max(r[2] for r in rows),
        max(r[3] for r in rows),
        sum(r[4] for r in rows),
    )


# --- the check --------------------------------------------------------------------------------------


class ServerContextError(ValueError):
    """Requests that lm-eval leaves longer than the server's own context: the server would refuse them."""

    def __init__(self, task: str, refused: int, requests: int, longest: int, server: int, max_length: int):
        super().__init__(
            f"task {task}: {refused} of {requests} requests are longer than the server's context of {server} "
            f"tokens (max_model_len, as its /v1/models reports it; the longest has {longest}), and lm-eval cuts "
            f"only at max_length {max_length}, so the server would refuse them in the middle of the run. Give "
            f"max_length={server} in --model_args (lm-eval then cuts them; a probe that needs its whole context "
            f"stops here unless allow_truncation is set), serve the model with a longer context, or shorten the "
            f"prompts with the task's knobs"
        )


def check(task, lm) -> Truncation | None:
    """Measure ``task``'s built requests on ``lm``; refuse (``TruncationError``) or record what is cut, and
    record where the context length cannot be known.

    ``task`` is a ``BeliefTask``: ``WHOLE_CONTEXT`` (what a cut would remove, "" when the probe does
    not need its whole context), ``options`` (the ``allow_truncation`` knob), ``config.metadata``."""
    ctx = context(lm) if lm is not None else None
    if ctx is None:
        return None
    name = task.config.task
    if ctx.measure is None or ctx.max_length is None:
        task.config.metadata["truncation"] = unknown_record(ctx, len(task.instances))
        log.warning("%s: requests not measured against a context length: %s", name, ctx.unknown)
        return None
    lengths = _lengths(ctx.measure, task.instances)
    cut = all_ranks(summarize(lengths, ctx.max_length), lm)
    if isinstance(ctx.server, int):
        refused = [n for n in lengths if min(n, ctx.max_length) > ctx.server]
        if refused:
            raise ServerContextError(name, len(refused), len(lengths), max(refused), ctx.server, ctx.max_length)
    if not cut.truncated and not ctx.source:
        return cut
    allowed = task.options.allow_truncation
    if cut.truncated:
        ll = [i.args[0] for i in task.instances if i.request_type == "loglikelihood"]
        causal = getattr(model_behind_cache(lm), "request_tokens", None) is None  # hf-mlm measures (and cuts) its own
        if causal and ll and not any(ll):  # every log-likelihood scored from its first token (BEAR): no cut can run
            raise TruncationError(name, cut, task.WHOLE_CONTEXT, scored_whole=True)
    if cut.truncated and task.WHOLE_CONTEXT and not allowed:
        raise TruncationError(name, cut, task.WHOLE_CONTEXT)
    if cut.truncated or ctx.server == "unknown":
        task.config.metadata["truncation"] = {**cut.record(bool(task.WHOLE_CONTEXT), allowed), **_origin(ctx)}
    if cut.truncated:
        log.warning(
            "%s: %d of %d requests are longer than max_length %d and are cut from the left (up to %d "
            "tokens, %d in all); the results JSON records it",
            name,
            cut.truncated,
            cut.requests,
            cut.max_length,
            cut.max_cut,
            cut.total_cut,
        )
    return cut


def _origin(ctx: Context) -> dict[str, Any]:
    """Where the limit came from, on backends other than hf (and the server's context for API models)."""
    out: dict[str, Any] = {"max_length_from": ctx.source} if ctx.source else {}
    if ctx.server is not None:
        out["server_max_model_len"] = ctx.server
    return out


def unknown_record(ctx: Context, requests: int) -> dict[str, Any]:
    """The results JSON's ``truncation`` entry of a task whose requests could not be measured."""
    return {"context_length": "unknown", "reason": ctx.unknown, "requests": requests, **_origin(ctx)}
