"""``hf-mlm``: any transformers masked LM as an lm-eval model.

Request types served:

* ``loglikelihood(context, continuation)``: the pseudo-log-likelihood (PLL) of the
  continuation's tokens, each predicted from a masked copy of ``context +
  continuation`` (special tokens added as the tokenizer does). Two masking
  schemes (``pll_metric=``):

  - ``original`` (Salazar et al. 2020): mask only the scored token;
  - ``within_word_l2r`` (Kauf & Ivanova 2023, the default, BEAR section 3.1):
    also mask the following tokens of the same word, so a multi-token word is
    scored left to right and its later pieces cannot leak into earlier ones.

  This is lm-pub-quiz 0.3.3's ``MaskedLMScoringMixin`` (same tokenisation of the
  whole statement, same word ids, same masks): ``loglikelihood("", statement)``
  equals its per-statement sum. ``is_greedy`` is True when every scored token is
  the argmax of its own masked position (what "greedy" means for a PLL).
* ``loglikelihood_rolling(text)``: the PLL of the whole text (every non-special token).
* ``loglikelihood_span(text, start, end)``: the PLL of the tokens covering
  ``text[start:end]`` with all the rest visible (lm-pub-quiz's answer-only
  ``conditional_score`` for an answer inside a statement).
* ``mask_topk(prompt, k[, targets])``: the top of the distribution at the single
  mask of ``prompt`` (``[MASK]`` marker or the model's own mask token). Returns
  the top-k tokens with log-probabilities and, for each target string, its token
  id at that position, log-probability and rank in the whole vocabulary (None when
  the target is not one token there). Used by the ``belief_mlm_*`` tasks.
* ``generate_until``: refused; a masked LM does not generate.

Masked copies of all requests are pooled, de-duplicated (identical masked inputs
are run once, whatever token they score), sorted by length and run ``batch_size``
copies per forward pass.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

import torch
from lm_eval.api.model import LM
from tqdm import tqdm

from belief_tasks.hooks.harness import launch_world_size, read_through
from belief_tasks.hooks.lm_eval_api import hf_collectives
from belief_tasks.requests import LOGLIKELIHOOD_SPAN, MASK, MASK_TOPK, object_token_id

log = logging.getLogger(__name__)

PLL_METRICS = ("original", "within_word_l2r")
DEFAULT_BATCH_SIZE = 32  # masked copies per forward pass, used for batch_size=auto

_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}

GENERATE_ERROR = (
    "hf-mlm serves masked language models, which cannot generate text, so generate_until tasks "
    "(belief_icl_*, belief_monitor_*, ...) cannot run on it. Use tasks that score text instead: "
    "loglikelihood / multiple-choice tasks such as belief_bear and belief_bear_big (pseudo-log-likelihood), "
    "or the belief_mlm_* tasks (mask prediction)."
)


def _as_batch_size(value) -> int:
    if value is None or (isinstance(value, str) and value.startswith("auto")):
        return DEFAULT_BATCH_SIZE
    size = int(value)
    if size < 1:
        raise ValueError(f"batch_size must be >= 1, got {value!r}")
    return size


def _as_device(value) -> torch.device:
    if value in (None, "", "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(value)
    if device.type == "cuda" and not torch.cuda.is_available():
        log.warning("hf-mlm: device %s requested but CUDA is not available; using cpu", value)
        return torch.device("cpu")
    return device


def _load_masked_lm(pretrained: Any, revision: str | None, subfolder: str | None, dtype: Any, trust_remote_code: bool):
    """The ``AutoModelForMaskedLM`` at ``pretrained`` (path or hub id), in ``dtype`` (checked first)."""
    from transformers import AutoModelForMaskedLM

    if isinstance(dtype, str) and dtype != "auto" and dtype not in _DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(_DTYPES)}, got {dtype!r}")
    torch_dtype = _DTYPES.get(dtype, dtype) if isinstance(dtype, str) else dtype
    extra = {"subfolder": subfolder} if subfolder else {}
    return AutoModelForMaskedLM.from_pretrained(
        str(pretrained), revision=revision or "main", dtype=torch_dtype, trust_remote_code=trust_remote_code, **extra
    )


def _load_tokenizer(
    tokenizer: str | None, pretrained: Any, revision: str | None, subfolder: str | None, trust_remote_code: bool
):
    """The fast ``AutoTokenizer`` named ``tokenizer`` (default: the model's own, from its subfolder)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        str(tokenizer or pretrained),
        revision=revision or "main",
        trust_remote_code=trust_remote_code,
        use_fast=True,
        **({"subfolder": subfolder} if subfolder and tokenizer is None else {}),
    )


class HFMaskedLM(LM):
    """lm-eval model for ``AutoModelForMaskedLM`` checkpoints (BERT, RoBERTa, ALBERT, ...).

    Model args (``--model_args``), in the style of lm-eval's ``hf``: ``pretrained``
    (path, hub id or a loaded model), ``tokenizer``, ``revision``, ``subfolder``,
    ``dtype`` (default ``auto``), ``device``, ``batch_size`` (masked copies per
    forward pass), ``trust_remote_code`` (default False), ``pll_metric``
    (``within_word_l2r`` | ``original``), ``max_length``.
    """

    def __init__(
        self,
        pretrained: Any = None,
        tokenizer: Any = None,
        revision: str | None = None,
        subfolder: str | None = None,
        dtype: Any = "auto",
        device: str | None = None,
        batch_size: int | str | None = DEFAULT_BATCH_SIZE,
        max_batch_size: int | None = None,  # passed by lm-eval; unused (auto = DEFAULT_BATCH_SIZE)
        trust_remote_code: bool = False,
        pll_metric: str = "within_word_l2r",
        max_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        from transformers import PreTrainedModel

        if kwargs:
            log.warning("hf-mlm: ignoring unknown model args %s", sorted(kwargs))
        if pll_metric not in PLL_METRICS:
            raise ValueError(f"pll_metric must be one of {PLL_METRICS}, got {pll_metric!r}")
        if pretrained is None:
            raise ValueError("hf-mlm needs pretrained=<path or hub id of a masked LM>")
        self.pll_metric = pll_metric
        self.batch_size = _as_batch_size(batch_size)
        self._device = _as_device(device)
        trust_remote_code = bool(trust_remote_code)

        # Any: transformers types ``PreTrainedModel.to`` through ``functools.wraps``, which reads as unbound
        self.model: Any
        if isinstance(pretrained, PreTrainedModel):
            self.model = pretrained
            if tokenizer is None:
                tokenizer = pretrained.config.name_or_path
        else:
            self.model = _load_masked_lm(pretrained, revision, subfolder, dtype, trust_remote_code)
        self._start_data_parallel()
        self.model.to(self._device).eval()
        if tokenizer is None or isinstance(tokenizer, str):
            self.tokenizer = _load_tokenizer(tokenizer, pretrained, revision, subfolder, trust_remote_code)
        else:
            self.tokenizer = tokenizer
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError("hf-mlm needs a fast (Rust) tokenizer: PLL scoring uses its offsets and word ids")
        if self.tokenizer.mask_token is None:
            raise ValueError(f"tokenizer of {pretrained} has no mask token: is it a masked LM?")
        self.mask_id = self.tokenizer.mask_token_id
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.max_length = int(max_length) if max_length else self._model_max_length()
        self._target_ids: dict[tuple[str, str], int | None] = {}

    # ------------------------------------------------------------------ data parallel

    def _start_data_parallel(self) -> None:
        """Under ``accelerate launch`` (``WORLD_SIZE`` > 1): this process's rank, as lm-eval's
        ``hf`` does, so the evaluator shards documents and gathers records (docs/scale.md)."""
        if launch_world_size() <= 1:
            return
        from accelerate import Accelerator

        self.accelerator = Accelerator()
        self._rank, self._world_size = self.accelerator.process_index, self.accelerator.num_processes
        if self._device.type == "cuda":  # one GPU per process
            self._device = self.accelerator.device

    # lm-eval's hf collectives (they read only self.world_size, self.rank and self.accelerator), those this release
    # has: lm_eval_api.hf_collectives
    locals().update(hf_collectives())

    # ------------------------------------------------------------------ helpers

    def _model_max_length(self) -> int:
        limits = [getattr(self.model.config, "max_position_embeddings", None), self.tokenizer.model_max_length]
        usable = [int(n) for n in limits if isinstance(n, int) and 0 < n < 1_000_000]
        return min(usable) if usable else 512

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def _encode(self, text: str):
        return self.tokenizer(
            text, add_special_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True
        )

    def request_tokens(self, request_type: str, args: list[tuple]) -> list[int | None]:
        """Per request, the tokens (specials included) of the text it puts in the model, which ``_fit``
        cuts to ``max_length`` (``belief_tasks.hooks.truncation``); None for requests never cut."""
        if request_type == "loglikelihood":
            texts = [a[0] + a[1] for a in args]
        elif request_type == LOGLIKELIHOOD_SPAN:
            texts = [a[0] for a in args]
        elif request_type == MASK_TOPK:
            texts = [a[0].replace(MASK, self.tokenizer.mask_token) for a in args]
        else:  # loglikelihood_rolling scores every token: a long text is refused, never cut
            return [None] * len(args)
        return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=True)["input_ids"]] if texts else []

    def _fit(self, ids: list, keep: Iterable[int], *aligned: list) -> tuple[int, list, tuple]:
        """Drop tokens from the left of the text (after leading specials) until it fits ``max_length``.

        Returns how many were dropped and the shortened lists. Tokens in ``keep``
        (scored tokens, the mask) may not be dropped.
        """
        excess = len(ids) - self.max_length
        if excess <= 0:
            return 0, ids, aligned
        special = aligned[0]
        start = next((i for i, s in enumerate(special) if not s), 0)
        dropped = range(start, start + excess)
        if any(i in dropped for i in keep):
            raise ValueError(
                f"text of {len(ids)} tokens does not fit the model's {self.max_length} "
                "without cutting the part that is scored"
            )
        log.warning("hf-mlm: input of %d tokens cut on the left to %d", len(ids), self.max_length)
        cut = lambda seq: list(seq[:start]) + list(seq[start + excess :])  # noqa: E731
        return excess, cut(ids), tuple(cut(a) for a in aligned)

    def _pll_copies(self, text: str, start: int, end: int) -> list[tuple[tuple[int, ...], int, int]]:
        """The masked copies scoring the tokens of ``text[start:end]``: ``[(masked ids, position, label)]``.

        A token is scored when it is not special and covers a character of the span;
        the rest of the text stays visible.
        """
        enc = self._encode(text)
        ids, special, offsets = enc["input_ids"], enc["special_tokens_mask"], enc["offset_mapping"]
        words = enc.word_ids()
        scored = [
            i
            for i, ((s, e), sp) in enumerate(zip(offsets, special))
            if not sp and ((s < end and e > start) or (s == e and start <= s < end))
        ]
        excess, ids, (special, words) = self._fit(ids, scored, special, words)
        scored = [i - excess for i in scored]
        copies = []
        for n, p in enumerate(scored):
            masked = list(ids)
            masked[p] = self.mask_id
            if self.pll_metric == "within_word_l2r" and words[p] is not None:
                # lm-pub-quiz: mask the following scored tokens while they belong to the same word.
                for q in scored[n + 1 :]:
                    if words[q] != words[p]:
                        break
                    masked[q] = self.mask_id
            copies.append((tuple(masked), p, ids[p]))
        return copies

    @torch.inference_mode()
    def _run(self, inputs: Sequence[tuple[tuple[int, ...], int]], desc: str, disable_tqdm: bool = False):
        """Yield ``(index, log-probabilities over the vocabulary)`` at position ``pos`` of each ``(ids, pos)``.

        Longest first, so padding is small and a too-large batch fails at once.
        """
        order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i][0]))
        bar = tqdm(total=len(order), desc=desc, disable=disable_tqdm or len(order) == 0)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = len(inputs[chunk[0]][0])
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
            attn = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                seq = inputs[i][0]
                ids[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                attn[row, : len(seq)] = 1
            positions = torch.tensor([inputs[i][1] for i in chunk], dtype=torch.long)
            logits = self.model(input_ids=ids.to(self._device), attention_mask=attn.to(self._device)).logits
            picked = logits[torch.arange(len(chunk), device=logits.device), positions.to(logits.device)]
            logprobs = torch.log_softmax(picked.float(), dim=-1).cpu()
            for row, i in enumerate(chunk):
                yield i, logprobs[row]
            bar.update(len(chunk))
        bar.close()

    def _score_copies(self, copies: dict[tuple[tuple[int, ...], int], set[int]], disable_tqdm: bool, scored=None):
        """``{(masked ids, pos): {label: (logprob, label is argmax)}}`` for every needed label; ``scored(key, value)``
        is called as soon as a copy's scores are in."""
        keys = list(copies)
        out = {}
        for i, lp in self._run(keys, "hf-mlm PLL", disable_tqdm):
            best = int(torch.argmax(lp))
            out[keys[i]] = {label: (float(lp[label]), label == best) for label in copies[keys[i]]}
            if scored is not None:
                scored(keys[i], out[keys[i]])
        return out

    # ------------------------------------------------------------ lm-eval API

    def _score_spans(
        self, spans: list[tuple[str, int, int]], disable_tqdm: bool, done=None
    ) -> list[tuple[float, bool]]:
        """PLL and is-greedy of each span; ``done(i, result)`` as soon as span ``i``'s copies are all scored (so its
        answer reaches lm-eval's cache then: a run killed mid-call resumes there)."""
        per_span: list[list] = []
        needed: dict[tuple, set] = {}
        for text, start, end in spans:
            copies = self._pll_copies(text, start, end)
            per_span.append([((m, p), label) for m, p, label in copies])
            for m, p, label in copies:
                needed.setdefault((m, p), set()).add(label)
        scores: dict = {}

        def result(items):
            token_scores = [scores[key][label] for key, label in items]
            return sum(s for s, _ in token_scores), all(g for _, g in token_scores)

        scored = None
        if done is not None:
            users: dict = {}
            left = [len({key for key, _ in items}) for items in per_span]
            for i, items in enumerate(per_span):
                for key in {key for key, _ in items}:
                    users.setdefault(key, []).append(i)

            def scored(key, value):
                scores[key] = value
                for i in users[key]:
                    left[i] -= 1
                    if not left[i]:
                        done(i, result(per_span[i]))

            for i, items in enumerate(per_span):
                if not items:
                    done(i, result(items))
        scores.update(self._score_copies(needed, disable_tqdm, scored))
        return [result(items) for items in per_span]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        spans = []
        for req in requests:
            context, continuation = req.args[0], req.args[1]
            spans.append((context + continuation, len(context), len(context) + len(continuation)))

        def keep(i, found):  # each answer in lm-eval's cache once it exists: a run killed mid-call resumes there
            self.cache_hook.add_partial("loglikelihood", requests[i].args, found)

        return self._score_spans(spans, disable_tqdm, keep)

    def loglikelihood_span(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """``args = (text, start, end)``: PLL of the tokens covering ``text[start:end]``, all the rest visible.

        lm-pub-quiz's ``conditional_score`` (answer tokens only) for an answer inside
        a statement, which ``loglikelihood(context, continuation)`` cannot express
        when text follows the answer. A custom request type like ``mask_topk``.
        """
        return read_through(
            self, LOGLIKELIHOOD_SPAN, requests, lambda rest: self._loglikelihood_span(rest, disable_tqdm)
        )

    def _loglikelihood_span(self, requests, disable_tqdm: bool) -> list[tuple[float, bool]]:
        def keep(i, found):  # each answer in lm-eval's cache once it exists
            self.cache_hook.add_partial(LOGLIKELIHOOD_SPAN, requests[i].args, found)

        return self._score_spans([(r.args[0], int(r.args[1]), int(r.args[2])) for r in requests], disable_tqdm, keep)

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """PLL of each whole text (all its non-special tokens); no windows, long texts are refused."""
        from belief_tasks.hooks.lm_eval_api import derived_instance

        as_pairs = [
            derived_instance(req, request_type="loglikelihood", arguments=("", req.args[0])) for req in requests
        ]
        results = [lp for lp, _ in self.loglikelihood(as_pairs, disable_tqdm)]
        for req, lp in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, lp)
        return results

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError(GENERATE_ERROR)

    def target_id(self, prompt: str, target: str) -> int | None:
        key = (prompt, target)
        if key not in self._target_ids:
            self._target_ids[key] = object_token_id(self.tokenizer, prompt, target)
        return self._target_ids[key]

    def _mask_input(self, prompt: str) -> tuple[tuple[int, ...], int]:
        text = prompt.replace(MASK, self.tokenizer.mask_token)
        enc = self._encode(text)
        ids = enc["input_ids"]
        where = [i for i, t in enumerate(ids) if t == self.mask_id]
        if len(where) != 1:
            raise ValueError(
                f"mask_topk prompt must hold exactly one {MASK} (or {self.tokenizer.mask_token}); "
                f"found {len(where)} in {prompt!r}"
            )
        excess, ids, _ = self._fit(ids, where, enc["special_tokens_mask"])
        return tuple(ids), where[0] - excess

    def mask_topk(self, requests, disable_tqdm: bool = False) -> list[dict]:
        """Top-k tokens at the single mask of each prompt, plus the rank of each target string.

        ``args = (prompt, k)`` or ``(prompt, k, targets)``. Response::

            {"tokens": [k token strings], "token_ids": [...], "logprobs": [...],
             "targets": {target: {"token", "token_id", "logprob", "rank"} | None},
             "vocab_size": V}

        ``rank`` is 1 + the number of vocabulary tokens with a strictly higher
        log-probability; a target that is not one token at the mask maps to None.

        Under ``--use_cache`` the method reads the database itself (lm-eval's ``CachingLM`` passes request
        types not its own through unread): ``harness.read_through``, as ``loglikelihood_span``.
        """
        return read_through(self, MASK_TOPK, requests, lambda rest: self._mask_topk(rest, disable_tqdm))

    def _mask_topk(self, requests, disable_tqdm: bool) -> list[dict]:
        inputs = [self._mask_input(req.args[0]) for req in requests]
        unique = list(dict.fromkeys(inputs))
        dists = {}
        for i, lp in self._run(unique, "hf-mlm mask_topk", disable_tqdm):
            dists[unique[i]] = lp
        results = []
        for req, key in zip(requests, inputs):
            prompt, k = req.args[0], int(req.args[1])
            targets = list(req.args[2]) if len(req.args) > 2 and req.args[2] else []
            lp = dists[key]
            top = torch.topk(lp, min(k, lp.numel()))
            ids = top.indices.tolist()
            out_targets: dict[str, dict[str, Any] | None] = {}
            for target in targets:
                tid = self.target_id(prompt, target)
                if tid is None:
                    out_targets[target] = None
                    continue
                value = lp[tid]
                out_targets[target] = {
                    "token": self.tokenizer.convert_ids_to_tokens(tid),
                    "token_id": tid,
                    "logprob": float(value),
                    "rank": int((lp > value).sum()) + 1,
                }
            result = {
                "tokens": self.tokenizer.convert_ids_to_tokens(ids),
                "token_ids": ids,
                "logprobs": [float(v) for v in top.values],
                "targets": out_targets,
                "vocab_size": int(lp.numel()),
            }
            results.append(result)
            self.cache_hook.add_partial(MASK_TOPK, req.args, result)
        return results
