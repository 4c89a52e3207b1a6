"""``vllm-serve-shared``: lm-eval's ``local-completions`` against ``vllm serve``, whose log-likelihoods read the
server's prefix cache.

lm-eval's ``local-completions`` scores with ``echo: true, logprobs: 1`` on ``/v1/completions``. vLLM 0.32's
server turns that into ``prompt_logprobs``, and so into ``skip_reading_prefix_cache=True``: no field of a
completions request changes it (``vllm_xargs`` lands in ``SamplingParams.extra_args``, which nothing in the
engine reads for this; unknown body fields are ignored). Its token endpoint does take it:
``vllm serve --enable-scale-out`` serves ``POST /inference/v1/generate`` with ``token_ids`` and the whole
``SamplingParams`` (``skip_reading_prefix_cache`` and ``detokenize`` included), and
``--enable-prompt-tokens-details`` reports each request's cache hit (``usage.prompt_tokens_details.cached_tokens``).
This backend sends ``local-completions``' log-likelihood requests, cut as it cuts them, through that endpoint in
the passes of ``backends/prefix_cache_plan.py`` (one request per HTTP call, ``num_concurrent`` at a time, so that
each count is that request's), recomputes every request whose read covered its continuation, and leaves
generation to ``local-completions``. The server's block size and cache size are read from its ``/metrics``
(``vllm:cache_config_info``). Its counts: the results JSON's ``config.vllm_shared``.

The server must not chunk prefills (``--no-enable-chunked-prefill``): a chunked prefill that the scheduler
preempts looks the cache up again when it resumes, and the server reports the first look-up's count only.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator
from urllib.parse import urlsplit

import requests as http
from lm_eval.models.openai_completions import LocalCompletionsAPI

from belief_tasks.backends.prefix_cache_plan import MAX_FIRST_TOKENS, CacheCounts, FirstRow, run_passes
from belief_tasks.hooks.harness import read_through
from belief_tasks.requests import PER_TOKEN_LOGLIKELIHOOD, encode_requests

log = logging.getLogger(__name__)

TOKEN_PATH = "/inference/v1/generate"
#: a read's tries: the rows a read skips hold the engine's uninitialised memory, and where that is a NaN or an
#: infinity the server cannot write its answer as JSON (400, "Out of range float values are not JSON compliant");
#: the same read again gets fresh memory (measured: 49 of 120 reads failed; the first of them, sent 10 more times,
#: passed each time), where a recomputation without a read pays the whole sequence
READ_TRIES = 4
SERVER_FLAGS = "--enable-scale-out --enable-prompt-tokens-details --no-enable-chunked-prefill"


class ServerSetupError(RuntimeError):
    """The server lacks what the passes need (a flag of ``vllm serve``): the message says which."""


@dataclass
class Served:
    """One request's answer from the token endpoint, in the shape ``run_passes`` and the parser read."""

    num_cached_tokens: int | None
    prompt_logprobs: list[dict[int, float] | None]
    preempted: bool = False
    retries: int = 0  # reads of this request the server answered 400 before this answer (``READ_TRIES``)


class VLLMServedSharedLM(LocalCompletionsAPI):
    """lm-eval's ``LocalCompletionsAPI`` with log-likelihoods through the server's prefix cache (module docstring)."""

    def __init__(self, base_url=None, **kwargs):
        super().__init__(base_url=base_url, **kwargs)
        parts = urlsplit(self.base_url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self.cache_counts = CacheCounts()
        self._cache_config: tuple[int, int | None] | None = None
        self._first_ids: int | None = None  # ids per first-token request the server allows (_first_token_ids)

    def get_model_info(self) -> dict:
        """lm-eval writes this into the results JSON's ``config``: the passes' counts of the run."""
        return {"vllm_shared": asdict(self.cache_counts)}

    def _server_cache(self) -> tuple[int, int | None]:
        """The server's block size and KV cache size in tokens (``/metrics``: ``vllm:cache_config_info``)."""
        if self._cache_config is None:
            text = http.get(
                f"{self._origin}/metrics", headers=self.header, verify=self.verify_certificate, timeout=30
            ).text
            line = next((x for x in text.splitlines() if x.startswith("vllm:cache_config_info{")), "")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            if labels.get("enable_prefix_caching") == "False":
                raise ServerSetupError(
                    "vllm-serve-shared: the server runs with prefix caching off; start it without "
                    "--no-enable-prefix-caching"
                )
            block = int(labels.get("block_size") or 16)
            blocks = labels.get("num_gpu_blocks")
            self._cache_config = block, (int(blocks) * block if blocks and blocks.isdigit() else None)
        return self._cache_config

    def _scored(self, requests, answer: Callable[[int, Served, list[int], int], None]) -> None:
        """Score lm-eval's ``(key, context_enc, continuation_enc)`` requests, cut as ``local-completions`` cuts them;
        ``answer(i, output, tokens, ctxlen)`` as each request's output is final (``run_passes``' ``done``)."""
        inputs, ctxlens, _ = self.batch_loglikelihood_requests([requests])  # local-completions' cut
        block, capacity = self._server_cache()
        first_ids = self._first_token_ids()
        run_passes(
            self._send_to(inputs),
            inputs,
            ctxlens,
            self.cache_counts,
            block_size=block,
            capacity_tokens=capacity,
            send_first=self._send_first if first_ids > 0 else None,
            done=lambda i, out: answer(i, out, inputs[i], ctxlens[i]),
            max_first_tokens=first_ids,
        )
        c = self.cache_counts
        log.info(
            "vllm-serve-shared: %d requests, %d prompt tokens, %d computed (distinct: %d), %d recomputed without "
            "the cache",
            c.requests,
            c.prompt_tokens,
            c.computed_tokens,
            c.distinct_tokens,
            c.recomputed,
        )

    def per_token_loglikelihood(self, requests, disable_tqdm: bool = False) -> list[list[float]]:
        """``Instance.args = (context, continuation)`` -> one log-probability per continuation token (MONITOR's
        ``per_token`` route), tokenised and cut as ``loglikelihood``; under ``--use_cache`` read back."""
        return read_through(self, PER_TOKEN_LOGLIKELIHOOD, requests, self._per_token)

    def _per_token(self, requests) -> list[list[float]]:
        results: list[Any] = [None] * len(requests)

        def answer(i: int, out: Served, inp: list[int], ctxlen: int) -> None:  # to the cache as it arrives
            rows = out.prompt_logprobs[ctxlen:]
            results[i] = [present(row)[tok] for tok, row in zip(inp[ctxlen:], rows, strict=True)]
            self.cache_hook.add_partial(PER_TOKEN_LOGLIKELIHOOD, requests[i].args, results[i])

        self._scored([(None, *pair) for pair in encode_requests(self, [r.args for r in requests])], answer)
        return results

    def _loglikelihood_tokens(self, requests, **kwargs) -> list[tuple[float, bool]]:
        res: list[Any] = [None] * len(requests)

        def answer(i: int, out: Served, inp: list[int], ctxlen: int) -> None:  # to the cache as it arrives
            res[i] = continuation_logprob(inp, out.prompt_logprobs, ctxlen)
            if requests[i][0] is not None:  # as lm-eval: rolling windows have no key
                self.cache_hook.add_partial("loglikelihood", requests[i][0], res[i])

        self._scored(requests, answer)
        return res

    def _send_to(self, inputs: list[list[int]]):
        url = f"{self._origin}{TOKEN_PATH}"

        def one(i: int, read: bool) -> Served:
            body = {
                "model": self.model,
                "token_ids": inputs[i],
                "sampling_params": {
                    "temperature": 0,
                    "max_tokens": 1,
                    "prompt_logprobs": 1,
                    "detokenize": False,
                    "skip_reading_prefix_cache": not read,
                },
            }
            failed = 0
            while True:
                r = http.post(url, json=body, headers=self.header, verify=self.verify_certificate, timeout=self.timeout)
                endpoint_served(url, r)
                if not (read and r.status_code == 400):  # a 400 is seen on reads only (READ_TRIES)
                    break
                failed += 1
                if failed == READ_TRIES:  # an unknown count, so recomputed without a read
                    return Served(None, [], retries=failed - 1)
            r.raise_for_status()
            data = r.json()
            details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
            if read and details.get("cached_tokens") is None:
                raise ServerSetupError(
                    f"vllm-serve-shared: the server does not report cache hits: start vllm serve with {SERVER_FLAGS}"
                )
            rows = [
                None if row is None else {int(t): float(v["logprob"]) for t, v in row.items()}
                for row in data["prompt_logprobs"]
            ]
            return Served(details.get("cached_tokens"), rows, retries=failed)

        def send(indices: list[int], read: bool) -> Iterator[Served]:
            """Each answer as it arrives (in order); on a failure the requests not yet sent are dropped."""
            pool = ThreadPoolExecutor(max_workers=max(int(self._concurrent), 1))
            try:
                yield from pool.map(lambda i: one(i, read), indices)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)

        return send

    def _first_token_ids(self) -> int:
        """How many token ids one first-token request may ask for on this server (``_send_first`` asks for one
        more, ``logprobs`` = that many): its ``max_logprobs`` (``vllm serve --max-logprobs``, 20 by default) less
        one, at most ``MAX_FIRST_TOKENS``; 0 when it allows fewer than 2 (those requests are then recomputed). The
        server states its limit only when it refuses a larger ask, so one request of a single token asks for
        ``MAX_FIRST_TOKENS + 1`` and reads the limit from the 400 (vLLM: "... greater than max allowed: 20")."""
        if self._first_ids is None:
            url = f"{self._origin}{TOKEN_PATH}"
            ask = MAX_FIRST_TOKENS + 1
            params = {"temperature": 0, "max_tokens": 1, "detokenize": False, "logprobs": ask}
            body = {"model": self.model, "token_ids": [self.prefix_token_id], "sampling_params": params}
            r = http.post(url, json=body, headers=self.header, verify=self.verify_certificate, timeout=self.timeout)
            endpoint_served(url, r)
            allowed = ask
            if r.status_code == 400 and (
                said := re.search(r"logprobs of \d+, which is greater than max allowed: (\d+)", r.text)
            ):
                allowed = int(said.group(1))
            else:
                r.raise_for_status()
            self._first_ids = max(min(allowed, ask) - 1, 0)
            log.info(
                "vllm-serve-shared: the server returns at most %d log-probabilities a token (--max-logprobs), so a "
                "first-token request asks for at most %d ids",
                allowed,
                self._first_ids,
            )
        return self._first_ids

    def _send_first(self, asks: list[tuple[tuple[int, ...], list[int]]]) -> list[FirstRow]:
        """First-token requests on the token endpoint. Its answer lists the sampled token and then at most
        ``logprobs`` entries in all, so the last id asked would be dropped: the list asked repeats its first id
        (the engine scores it twice, the answer holds it once), which leaves room for every id. ``logprobs`` is
        capped by the server's ``max_logprobs``: the plan splits a context's ids into asks that fit it
        (``_first_token_ids``)."""
        url = f"{self._origin}{TOKEN_PATH}"

        def one(ask: tuple[tuple[int, ...], list[int]]) -> FirstRow:
            context, tokens = ask
            ids = [*tokens, tokens[0]]
            body = {
                "model": self.model,
                "token_ids": list(context),
                "sampling_params": {
                    "temperature": 0,
                    "max_tokens": 1,
                    "detokenize": False,
                    "logprobs": len(ids),
                    "logprob_token_ids": ids,
                    "skip_reading_prefix_cache": False,
                },
            }
            r = http.post(url, json=body, headers=self.header, verify=self.verify_certificate, timeout=self.timeout)
            r.raise_for_status()
            data = r.json()
            step = data["choices"][0]["logprobs"]["content"][0]
            logprobs = {int(x["token_id"]): float(x["logprob"]) for x in step["top_logprobs"]}
            logprobs[int(step["token_id"])] = float(step["logprob"])
            details = (data.get("usage") or {}).get("prompt_tokens_details") or {}
            return FirstRow(int(step["token_id"]), logprobs, details.get("cached_tokens"))

        with ThreadPoolExecutor(max_workers=max(int(self._concurrent), 1)) as pool:
            return list(pool.map(one, asks))


def endpoint_served(url: str, response) -> None:
    """A 403 or 404 from the token endpoint: the server was started without it (``ServerSetupError``)."""
    if response.status_code in (403, 404):
        raise ServerSetupError(
            f"vllm-serve-shared: {url} answered {response.status_code} ({response.text[:200]}): start "
            f"vllm serve with {SERVER_FLAGS}"
        )


def continuation_logprob(tokens: list[int], rows: list[dict[int, float] | None], ctxlen: int) -> tuple[float, bool]:
    """lm-eval's ``VLLM._parse_logprobs`` on the endpoint's rows: the sum of the continuation tokens' rows (from
    ``ctxlen`` on), and whether each token is its row's likeliest."""
    pairs = [(tok, present(row)) for tok, row in zip(tokens[ctxlen:], rows[ctxlen:], strict=True)]
    total = sum(row[tok] for tok, row in pairs)
    greedy = all(max(row, key=row.__getitem__) == tok for tok, row in pairs)
    return total, greedy


def present(row: dict[int, float] | None) -> dict[int, float]:
    """A continuation position's row (vLLM leaves only a prompt's first position without one)."""
    if row is None:
        raise ValueError("vLLM returned no log-probabilities for a continuation position")
    return row
