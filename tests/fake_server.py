"""A small OpenAI-style completions server on 127.0.0.1, started and stopped by a test.

It answers what lm-eval's ``local-completions`` sends, as vLLM's ``/v1/completions`` does in shape:
log-likelihood requests (``echo`` with ``logprobs``: one log-probability per prompt token, each the top
one) and generations (a fixed text). Its log-probabilities are a function of the token ids, so two runs
give the same numbers. Failures are switched on per test: refuse sampled requests (400 with vLLM's
message for an out-of-range seed), answer without log-probabilities, or fail (503) after N answers.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEED_MESSAGE = "body.seed: Input should be less than or equal to 9223372036854775807"


def token_logprob(token: int) -> float:
    return -0.1 - (token * 7919 % 97) / 10


class FakeServer:
    def __init__(self, model: str = "fake-model", max_model_len: int | None = None, root: str | None = None):
        self.model, self.max_model_len, self.root = model, max_model_len, root  # root: what vLLM's /v1/models names
        self.answered = 0  # completions answered
        self.received = 0  # completions asked (answered or not)
        self.fail_after: int | None = None  # 503 once this many are answered
        self.refuse_sampled = False
        self.no_logprobs = False
        self.prompts: list = []  # every prompt answered, in order
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: dict):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    entry = {"id": server.model, "object": "model"}
                    if server.max_model_len is not None:
                        entry["max_model_len"] = server.max_model_len
                    if server.root is not None:
                        entry["root"] = server.root
                    return self._send(200, {"object": "list", "data": [entry]})
                return self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/completions":
                    return self._send(404, {"detail": "Not Found"})
                with lock:
                    server.received += 1
                    if server.fail_after is not None and server.answered >= server.fail_after:
                        return self._send(503, {"error": {"message": "the engine is gone (fake failure)"}})
                    if server.refuse_sampled and body.get("temperature", 0) > 0:
                        return self._send(400, {"error": {"message": SEED_MESSAGE, "type": "BadRequestError"}})
                    prompts = body["prompt"]
                    prompts = (
                        prompts if isinstance(prompts, list) and prompts and isinstance(prompts[0], list) else [prompts]
                    )
                    choices = [server.choice(i, p, body) for i, p in enumerate(prompts)]
                    server.answered += 1
                    server.prompts += prompts
                return self._send(
                    200, {"id": "cmpl", "object": "text_completion", "model": server.model, "choices": choices}
                )

        lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def choice(self, index: int, prompt, body: dict) -> dict:
        if not body.get("echo"):
            return {"index": index, "text": " Paris", "finish_reason": "stop", "logprobs": None}
        if self.no_logprobs:
            return {"index": index, "text": "", "finish_reason": "length"}
        tokens = list(prompt) + [0]  # echo: the prompt and the one generated token
        lps = [None] + [token_logprob(t) for t in tokens[1:]]
        return {
            "index": index,
            "text": "",
            "finish_reason": "length",
            "logprobs": {
                "tokens": [str(t) for t in tokens],
                "token_logprobs": lps,
                "top_logprobs": [None] + [{str(t): lp} for t, lp in zip(tokens[1:], lps[1:])],
            },
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/completions"

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


def closed_port_url() -> str:
    """A completions URL on 127.0.0.1 where nothing listens (a port just released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1/completions"
