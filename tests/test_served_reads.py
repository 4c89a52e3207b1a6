"""``vllm-serve-shared``'s reads of the server's prefix cache, on a fake HTTP server: a read the server cannot write
as JSON (400: the rows it skipped held a NaN or an infinity) is sent again, and what each try computed is counted.
The real server's side: tests/engines/test_vllm_server.py."""

from __future__ import annotations

import json

import pytest

from belief_tasks.backends import vllm_served
from belief_tasks.backends.prefix_cache_plan import CacheCounts, run_passes

JUNK = '{"error": {"message": "Out of range float values are not JSON compliant", "code": 400}}'


class Reply:
    def __init__(self, status: int, body: str):
        self.status_code, self.text = status, body

    def json(self):
        return json.loads(self.text)

    def raise_for_status(self):
        if self.status_code >= 400:
            raise RuntimeError(self.text)


def bare_lm() -> vllm_served.VLLMServedSharedLM:
    """The backend with what its token endpoint calls read, and no server behind it (``http.post`` is replaced)."""
    lm = object.__new__(vllm_served.VLLMServedSharedLM)
    lm._origin, lm.model, lm.header, lm.verify_certificate, lm.timeout, lm._concurrent = "http://s", "m", {}, 1, 1, 1
    return lm


def served_lm(monkeypatch, failures: list[int], cached: int):
    """A backend whose server answers each read 400 ``failures.pop(0)`` times, then with ``cached`` tokens read
    and a row per position (the rows a read skipped as None); a request without a read is always answered."""
    lm = bare_lm()
    posts: list[bool] = []
    left = {"n": 0, "next": list(failures)}

    def post(url, **kw):
        read = not kw["json"]["sampling_params"]["skip_reading_prefix_cache"]
        posts.append(read)
        ids = kw["json"]["token_ids"]
        if read and left["n"] == 0 and left["next"]:
            left["n"] = left["next"].pop(0) + 1
        if read and left["n"] > 1:
            left["n"] -= 1
            return Reply(400, JUNK)
        left["n"] = 0
        n = cached if read else 0
        rows = [None] + [None if p <= n else {str(t): {"logprob": -0.5}} for p, t in enumerate(ids) if p > 0]
        usage = {"prompt_tokens_details": {"cached_tokens": n}}
        return Reply(200, json.dumps({"usage": usage, "prompt_logprobs": rows}))

    monkeypatch.setattr(vllm_served.http, "post", post)
    return lm, posts


def test_a_read_answered_400_is_sent_again_and_each_try_is_counted(monkeypatch):
    seq = list(range(10, 50))  # 40 tokens; the server read 32 of them
    lm, posts = served_lm(monkeypatch, failures=[2], cached=32)
    (out,) = list(lm._send_to([seq])([0], True))
    assert (out.num_cached_tokens, out.retries) == (32, 2) and posts == [True] * 3
    assert out.prompt_logprobs[33] == {seq[33]: -0.5}

    lm, posts = served_lm(monkeypatch, failures=[2], cached=32)
    counts = CacheCounts()
    (final,) = run_passes(lm._send_to([seq]), [seq], [36], counts, block_size=32)
    # one request of a 36-token context: read (not covered: 32 < 36), two 400s before the answer
    assert (counts.retried, counts.recomputed, counts.unknown) == (2, 0, 0)
    assert counts.computed_tokens == (40 - 32) * 3
    assert final.prompt_logprobs[36] == {seq[36]: -0.5}


def test_a_read_the_server_never_answers_is_recomputed_without_one(monkeypatch):
    seq = list(range(10, 50))
    lm, posts = served_lm(monkeypatch, failures=[vllm_served.READ_TRIES], cached=32)
    counts = CacheCounts()
    (final,) = run_passes(lm._send_to([seq]), [seq], [36], counts, block_size=32)
    assert posts == [True] * vllm_served.READ_TRIES + [False]
    assert (counts.retried, counts.unknown, counts.recomputed) == (vllm_served.READ_TRIES - 1, 1, 1)
    # the tries' counts are unknown: each counted whole, then the recomputation
    assert counts.computed_tokens == 40 * vllm_served.READ_TRIES + 40
    assert final.prompt_logprobs[36] == {seq[36]: -0.5}


@pytest.mark.parametrize("status", [403, 404])
def test_a_server_without_the_token_endpoint_is_named_not_retried(monkeypatch, status):
    lm = bare_lm()
    posts = []
    monkeypatch.setattr(vllm_served.http, "post", lambda url, **_: posts.append(url) or Reply(status, "no"))
    with pytest.raises(vllm_served.ServerSetupError, match="--enable-scale-out"):
        list(lm._send_to([[1, 2, 3]])([0], True))
    assert len(posts) == 1
