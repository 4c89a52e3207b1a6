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

Other backends (vLLM, API models) are not measured: nothing is recorded or refused there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Iterable

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
        return {"max_length": self.max_length, "requests": self.requests, "truncated_requests": self.truncated,
                "longest_request_tokens": self.longest, "max_tokens_cut": self.max_cut,
                "total_tokens_cut": self.total_cut, "needs_whole_context": whole_context,
                KNOB: allowed}


def summarize(lengths: Iterable[int], max_length: int) -> Truncation:
    """``Truncation`` of requests of ``lengths`` tokens in a context of ``max_length`` tokens."""
    lengths = list(lengths)
    cuts = [n - max_length for n in lengths if n > max_length]
    return Truncation(max_length, len(lengths), len(cuts), max(lengths, default=0), max(cuts, default=0), sum(cuts))


class TruncationError(ValueError):
    """Requests of a task that needs its whole context are longer than the model's ``max_length``."""

    def __init__(self, task: str, cut: Truncation, lost: str, scored_whole: bool = False):
        self.task, self.cut = task, cut
        if scored_whole:  # BEAR's statements: no cut can run, so allow_truncation is no way out
            super().__init__(
                f"task {task}: {cut.truncated} of {cut.requests} requests are longer than the model's max_length of "
                f"{cut.max_length} tokens (the longest has {cut.longest}, {cut.max_cut} too many). Each is a "
                f"statement scored whole, from its first token, so no backend can cut it (lm-eval's hf stops with an "
                f"AssertionError) and {KNOB} cannot apply. Use a model with a longer context (max_length=... in "
                f"--model_args, up to what the model supports), or leave out the relations or templates with the "
                f"longest statements (the relations and templates knobs)")
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


def request_lengths(lm, instances: list) -> list[int] | None:
    """Tokens each request of ``instances`` needs in ``lm``'s context (see the module doc), None when
    ``lm``'s backend is not one we can measure. Requests that are never cut are left out."""
    lm = unwrap(lm)
    measure = getattr(lm, "request_tokens", None) or _hflm_request_tokens(lm)  # hf-mlm measures its own
    if measure is None:
        return None
    by_type: dict[str, dict] = {}  # request type -> {hashable args: args}, distinct requests only
    keys = [(inst.request_type, _hashable(inst.args)) for inst in instances]
    for (kind, key), inst in zip(keys, instances):
        by_type.setdefault(kind, {}).setdefault(key, inst.args)
    tokens = {}
    for kind, distinct in by_type.items():
        tokens.update(((kind, key), n) for key, n in zip(distinct, measure(kind, list(distinct.values()))))
    return [tokens[k] for k in keys if tokens[k] is not None]


def unwrap(lm):
    """The model itself: under ``--use_cache`` lm-eval's ``CachingLM`` wraps it."""
    from lm_eval.api.model import CachingLM

    return lm.lm if isinstance(lm, CachingLM) else lm


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
            return [_pair_tokens(lm, *a[:2]) - 1 for a in args]
        if request_type == "generate_until":
            from lm_eval.models.utils import normalize_gen_kwargs

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


def _pair_tokens(lm, context: str, continuation: str) -> int:
    """len(context_enc + continuation_enc) as ``TemplateLM.loglikelihood`` encodes them. For a causal
    model ``_encode_pair`` encodes the pair as one string (a trailing space only moves from the
    context to the continuation), so one ``tok_encode`` gives its length."""
    if context == "":
        continuation_enc = lm.tok_encode(continuation, add_special_tokens=False)
        return len(continuation_enc) + (lm.prefix_token_id != continuation_enc[0])
    return len(lm.tok_encode(context + continuation))


def all_ranks(cut: Truncation, lm) -> Truncation:
    """``cut`` combined over the processes of a data-parallel launch (every rank gets the same), so that
    all of them record or refuse alike."""
    lm = unwrap(lm)
    if getattr(lm, "world_size", 1) <= 1:
        return cut
    import torch

    mine = torch.tensor([[cut.requests, cut.truncated, cut.longest, cut.max_cut, cut.total_cut]], device=lm.device)
    rows = lm.all_gather(mine).view(-1, 5).cpu().tolist()
    return Truncation(cut.max_length, sum(r[0] for r in rows), sum(r[1] for r in rows), max(r[2] for r in rows),
                      max(r[3] for r in rows), sum(r[4] for r in rows))


# --- the check --------------------------------------------------------------------------------------


def check(task, lm) -> Truncation | None:
    """Measure ``task``'s built requests on ``lm``; refuse (``TruncationError``) or record what is cut.

    ``task`` is a ``BeliefTask``: ``WHOLE_CONTEXT`` (what a cut would remove, "" when the probe does
    not need its whole context), ``options`` (the ``allow_truncation`` knob), ``config.metadata``."""
    if lm is None:
        return None
    lengths = request_lengths(lm, task.instances)
    if lengths is None:
        return None
    cut = all_ranks(summarize(lengths, int(unwrap(lm).max_length)), lm)
    if not cut.truncated:
        return cut
    allowed = bool(task.options.get(KNOB))
    ll = [i.args[0] for i in task.instances if i.request_type == "loglikelihood"]
    causal = getattr(unwrap(lm), "request_tokens", None) is None  # hf / hf-shared (hf-mlm measures its own)
    if causal and ll and not any(ll):  # every log-likelihood scored from its first token (BEAR): no cut can run
        raise TruncationError(task.config.task, cut, task.WHOLE_CONTEXT, scored_whole=True)
    if task.WHOLE_CONTEXT and not allowed:
        raise TruncationError(task.config.task, cut, task.WHOLE_CONTEXT)
    task.config.metadata["truncation"] = cut.record(bool(task.WHOLE_CONTEXT), allowed)
    log.warning("%s: %d of %d requests are longer than max_length %d and are cut from the left (up to %d tokens, "
                "%d in all); the results JSON records it", task.config.task, cut.truncated, cut.requests,
                cut.max_length, cut.max_cut, cut.total_cut)
    return cut
