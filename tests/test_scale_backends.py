"""lm-eval's OpenAI-compatible ``local-completions`` backend against a stub server (docs/backends_support.md).

The stub is a real HTTP server on 127.0.0.1 (an ephemeral port, a daemon thread,
shut down by the fixture) that answers ``/v1/completions`` the way vLLM's server
does, with the bundled model behind it: ``echo`` + ``logprobs`` for log-likelihoods,
greedy text for ``temperature: 0``. It records every payload, so the test can check
what lm-eval sends (in particular the fixed ``seed`` of sampled requests).

The results must equal the ``hf`` backend's on the same docs: log-likelihoods to
float noise, greedy answers exactly.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import evaluate

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("one_torch_thread")]
pytest.importorskip("tenacity", reason="lm-eval's API backends need its [api] extra (pip install 'lm-eval[api]')")

METADATA = {"relations": "P1303", "max_facts_per_relation": 1, "templates": "0", "confidence_samples": 0}


class StubModel:
    """The bundled model behind an OpenAI-style completions endpoint (token-id prompts)."""

    def __init__(self, path):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
        self.lock = threading.Lock()

    def _ids(self, prompt) -> list[int]:
        return list(prompt) if isinstance(prompt, list) else self.tok(prompt)["input_ids"]

    def echo_logprobs(self, ids: list[int]) -> dict:
        """token_logprobs / top_logprobs of the prompt (first None) plus one greedy token."""
        with self.torch.no_grad():
            logits = self.model(self.torch.tensor([ids])).logits[0].float()
        logp = self.torch.log_softmax(logits, dim=-1)
        greedy = int(logp[-1].argmax())
        token_lp = [None] + [float(logp[i - 1, ids[i]]) for i in range(1, len(ids))] + [float(logp[-1, greedy])]
        top = [None] + [
            {self.tok.decode([int(logp[i - 1].argmax())]): float(logp[i - 1].max())} for i in range(1, len(ids))
        ]
        top.append({self.tok.decode([greedy]): float(logp[-1, greedy])})
        return {
            "tokens": [self.tok.decode([t]) for t in ids + [greedy]],
            "token_logprobs": token_lp,
            "top_logprobs": top,
        }

    def greedy(self, ids: list[int], max_tokens: int, stop: list[str]) -> str:
        with self.torch.no_grad():
            out = self.model.generate(
                self.torch.tensor([ids]),
                attention_mask=self.torch.ones(1, len(ids), dtype=self.torch.long),
                max_new_tokens=max_tokens,
                do_sample=False,
                pad_token_id=self.tok.eos_token_id,
            )
        text = self.tok.decode(out[0, len(ids) :], skip_special_tokens=True)
        cut = min([text.find(s) for s in stop if s and s in text], default=len(text))
        return text[:cut]

    def complete(self, payload: dict) -> dict:
        prompts = payload["prompt"]
        if not (isinstance(prompts, list) and prompts and isinstance(prompts[0], (list, str))):
            prompts = [prompts]
        choices = []
        with self.lock:
            for i, p in enumerate(prompts):
                ids = self._ids(p)
                if payload.get("echo"):
                    choices.append({"index": i, "text": "", "logprobs": self.echo_logprobs(ids)})
                else:
                    if payload.get("temperature", 0) not in (0, 0.0):
                        raise ValueError("the stub serves greedy generation only")
                    choices.append(
                        {"index": i, "text": self.greedy(ids, int(payload["max_tokens"]), payload.get("stop") or [])}
                    )
        return {"id": "stub", "object": "text_completion", "choices": choices}


@pytest.fixture(scope="module")
def stub_server(model_path):
    model = StubModel(model_path)
    payloads: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            payloads.append(body)
            try:
                data, code = json.dumps(model.complete(body)).encode(), 200
            except Exception as e:  # answered, so the client reports it instead of hanging
                data, code = json.dumps({"error": str(e)}).encode(), 400
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/completions", payloads
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def records(results, task):
    return {s["doc_id"]: s[s["metrics"][0]] for s in results["samples"][task]}


def test_local_completions_matches_hf(model_path, stub_server):
    url, payloads = stub_server
    tasks = ["belief_bear", "belief_mp_zeroshot"]
    api = evaluate(
        tasks,
        f"model=stub,base_url={url},tokenizer_backend=huggingface,tokenizer={model_path},"
        "num_concurrent=1,max_retries=1,max_length=2048",
        model="local-completions",
        metadata=METADATA,
        limit=2,
        batch_size=1,
    )
    hf = evaluate(
        tasks, f"pretrained={model_path},dtype=float32", metadata=METADATA, limit=2, batch_size=1, device="cpu"
    )

    bear_api, bear_hf = records(api, "belief_bear"), records(hf, "belief_bear")
    assert bear_api.keys() == bear_hf.keys() and len(bear_api) == 1
    for k in bear_hf:
        assert len(bear_api[k]["ll"]) == 42
        assert max(abs(a - b) for a, b in zip(bear_api[k]["ll"], bear_hf[k]["ll"], strict=True)) < 1e-3
        assert bear_api[k]["pred"] == bear_hf[k]["pred"]
    gen_api, gen_hf = records(api, "belief_mp_zeroshot"), records(hf, "belief_mp_zeroshot")
    assert gen_api.keys() == gen_hf.keys() and len(gen_api) == 1  # one document per pair
    assert [gen_api[k]["answers"] for k in sorted(gen_api)] == [gen_hf[k]["answers"] for k in sorted(gen_hf)]

    # what went over the wire: echo + logprobs for scoring; greedy generation with lm-eval's fixed seed
    scoring = [p for p in payloads if p.get("echo")]
    generation = [p for p in payloads if not p.get("echo")]
    assert scoring and all(p["logprobs"] == 1 and p["max_tokens"] == 1 for p in scoring)
    assert generation and all(p["temperature"] == 0 and p["seed"] == 1234 for p in generation)


def test_a_request_seed_reaches_the_server():
    """BELIEF's K sampled answers on an OpenAI-style server (docs/backends_support.md): lm-eval
    puts ``seed: <model_args seed, 1234>`` into every generation payload, so a server that
    honours seeds would return the same "sample" K times. Our sampled requests carry their own
    ``seed`` in their generation kwargs, which overrides it: K different seeds reach the server."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from belief_tasks.tasks.belief_icl import sample_seed, sampling_kwargs

    api = object.__new__(LocalCompletionsAPI)  # _create_payload reads only these two attributes
    api.model, api._max_gen_toks = "stub", 256
    greedy = {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}
    doc = {"seed": 1234, "fact_id": "P36/Q142", "template_id": "P36_t0", "subject_form": "label", "style": "qa"}
    payloads = [
        api._create_payload(
            [[1, 2]], generate=True, gen_kwargs=sampling_kwargs(greedy, i, sample_seed(doc, i)), seed=1234
        )
        for i in range(3)
    ]
    assert all(p["temperature"] == 1.0 and p["max_tokens"] == 16 for p in payloads)
    assert [p["seed"] for p in payloads] == [sample_seed(doc, i) for i in range(3)]
    assert len({p["seed"] for p in payloads}) == 3 and 1234 not in {p["seed"] for p in payloads}
