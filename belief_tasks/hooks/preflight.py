"""One probe request per request kind of a task, sent to a server or engine before the long run.

lm-eval sends all requests of a type for every task together, after all tasks are built. A server that
cannot serve one kind of request (a 4xx for a field it refuses, no server at ``base_url``, no
``echo``/``logprobs`` for log-likelihoods) would otherwise stop the run in the middle, after retries, with
a traceback, and a run without ``--use_cache`` keeps nothing. ``check`` (called by ``BeliefTask`` once its
requests are built and measured, before anything is scored) sends one request of each kind of the task
(log-likelihood, greedy generation, sampled generation, ...) through the model, and turns a failure into
one paragraph (``PreflightError``): the task, the request kind, the server's own message, what to do.

* Only backends that talk to something that can refuse a request are probed: lm-eval's API models
  (``local-completions``, ...) and its ``vllm`` engine (ours on vLLM too), not a data-parallel one (its
  engines start anew for every call). ``hf`` and our other backends are not.
* The probe of a kind is its longest request (by characters), so a server context shorter than the
  task's requests shows here too, and under ``--use_cache`` one whose answer is not cached yet: its
  answer is written to the cache (``harness.read_through``), so the run does not ask it again and a rerun
  sends nothing that was answered. A kind whose requests are all cached sends nothing.
* A request type the backend has no method for (MONITOR's ``per_token_loglikelihood`` on an API model)
  is named the same way.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from belief_tasks.hooks import harness
from belief_tasks.hooks.lm_eval_api import hash_args, kinds_of, model_behind_cache

log = logging.getLogger(__name__)


class PreflightError(RuntimeError):
    """A probe request of a task failed on the backend: the message is one paragraph."""


def probed(lm) -> bool:
    """Whether ``lm``'s backend is probed: lm-eval's API models and its vLLM engine, except a data-parallel
    engine (``data_parallel_size`` > 1: lm-eval starts its engines anew for every call, so each probe would
    cost the engines' start-up, minutes for a large model)."""
    inner = model_behind_cache(lm)
    kinds = kinds_of(inner)
    if "vllm" in kinds and int(getattr(inner, "data_parallel_size", 1)) > 1:
        return False
    return bool(kinds & {"api", "vllm"})


def kind(instance) -> str:
    """The request kind a probe stands for: the request type, generations split by how they decode."""
    if instance.request_type != "generate_until":
        return instance.request_type
    kwargs = instance.args[1] if len(instance.args) > 1 and isinstance(instance.args[1], dict) else {}
    if not kwargs.get("do_sample"):
        return "generate_until (greedy)"
    return "generate_until (sampled, with its own seed)" if "seed" in kwargs else "generate_until (sampled)"


def check(task, lm) -> list[str]:
    """Send ``task``'s probes to ``lm`` (the model of the evaluate call); the kinds probed. Raises
    ``PreflightError`` on the first failure."""
    if lm is None or not probed(lm):
        return []
    inner = model_behind_cache(lm)
    db = harness.cache_of(inner)  # lm-eval's --use_cache database, handed to the model it wraps
    by_kind: dict[str, list] = {}
    for inst in task.instances:
        by_kind.setdefault(kind(inst), []).append(inst)
    done = []
    for name, instances in by_kind.items():
        method = getattr(inner, instances[0].request_type, None)
        if not callable(method):
            raise PreflightError(
                f"task {task.config.task}: the {_backend(inner)} backend has no {instances[0].request_type} "
                f"method, which this task's {len(instances)} {name} requests need. Run the task on a backend that "
                f"has it (docs/backends_support.md lists which backend serves which request type)"
            )
        todo = [i for i in instances if db is None or not _read_back(i) or _key(i) not in db]
        if not todo:
            continue
        probe = max(todo, key=lambda i: sum(len(a) for a in i.args if isinstance(a, str)))
        try:
            answer = _ask(inner, probe, method)
        except Exception as error:  # noqa: BLE001 - every failure becomes the one paragraph below
            raise PreflightError(message(task.config.task, name, probe, inner, error)) from error
        problem = _bad_answer(probe.request_type, answer)
        if problem:
            raise PreflightError(message(task.config.task, name, probe, inner, ValueError(problem)))
        done.append(name)
    if done:
        log.info("%s: one probe request of each kind answered (%s)", task.config.task, ", ".join(done))
    return done


def _key(instance) -> str:
    return hash_args(instance.request_type, instance.args)


def _read_back(instance) -> bool:
    """Whether a run under --use_cache reads ``instance``'s answer back on a probed backend (lm-eval's API
    models and vLLM): lm-eval's ``CachingLM`` never reads a sample, seeded or not; only our own backends and
    stock ``hf`` read back the seeded samples of our tasks."""
    return instance.request_type != "generate_until" or not instance.args[1].get("do_sample")


def _ask(inner, probe, method) -> Any:
    compute = lambda reqs: method(reqs, disable_tqdm=True)  # noqa: E731
    if not _read_back(probe):
        return compute([probe])[0]
    return harness.read_through(inner, probe.request_type, [probe], compute)[0]


def _bad_answer(request_type: str, answer: Any) -> str:
    """What is wrong with a probe's answer ("" when it has the shape lm-eval expects)."""
    if request_type == "loglikelihood":
        ok = isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[0], (int, float))
        if not ok or not math.isfinite(answer[0]) or answer[0] > 1e-6:
            return f"the answer {answer!r} is not a log-probability and a greedy flag"
    if request_type == "generate_until" and not isinstance(answer, str):
        return f"the answer {answer!r} is not a text"
    return ""


# --- the paragraph ----------------------------------------------------------------------------------


def _backend(lm) -> str:
    return type(lm).__name__ + (f" at {lm.base_url}" if getattr(lm, "base_url", None) else "")


def server_message(error: BaseException) -> tuple[int | None, str]:
    """The HTTP status and the server's own message of ``error`` (requests' or aiohttp's), else (None, text)."""
    response = getattr(error, "response", None)
    if response is not None and getattr(response, "status_code", None) is not None:
        return response.status_code, _readable(response.text)
    status = getattr(error, "status", None)  # aiohttp.ClientResponseError
    if isinstance(status, int):
        return status, _readable(str(getattr(error, "message", "") or error))
    return None, _readable(f"{type(error).__name__}: {error}")


def _readable(text: str) -> str:
    """A JSON error body's message (OpenAI style ``{"error": {"message": ...}}``, FastAPI ``detail``), one line."""
    try:
        body = json.loads(text)
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        found = (inner.get("message") or inner.get("detail")) if isinstance(inner, dict) else inner
        text = json.dumps(found) if not isinstance(found, str) else found
    text = " ".join(str(text).split())
    return text if len(text) <= 600 else text[:600] + " ..."


def _advice(status: int | None, error: BaseException, request_type: str) -> str:
    import requests

    refused_connection = isinstance(error, requests.ConnectionError) or type(error).__name__ in (
        "ClientConnectorError",
        "ClientConnectionError",
        "ServerDisconnectedError",
    )
    if refused_connection:
        return (
            "Nothing answered there: start the server, or point base_url in --model_args at it (the full "
            "endpoint, e.g. http://127.0.0.1:8000/v1/completions for local-completions)"
        )
    if status == 404:
        return (
            "base_url must be the full endpoint (.../v1/completions for local-completions, "
            ".../v1/chat/completions for local-chat-completions) and model= the name the server serves (its "
            "/v1/models lists it)"
        )
    if status in (401, 403):
        return "give the server's key (OPENAI_API_KEY in the environment, or auth_token= in --model_args)"
    if status is not None and status >= 500:
        return "the server failed on this request: its own log says why; fix the server and run the command again"
    if status is not None:
        return (
            "the server refused the request as sent (its message names the field): change the setting that "
            "produced it (--gen_kwargs, the task's knobs, --model_args) or the server's limits, or run the task "
            "on a backend that accepts it"
        )
    if request_type == "loglikelihood" and isinstance(error, (KeyError, TypeError, IndexError, AssertionError)):
        return (
            "log-likelihood requests need a completions endpoint that returns the prompt's log-probabilities "
            "(echo=true with logprobs, as vLLM's /v1/completions does); chat endpoints and servers without "
            "echo cannot score them: use local-completions against such a server, or a local backend (hf, vllm)"
        )
    return "the backend failed on this request: see the message, fix its cause and run the command again"


def message(task: str, kind_name: str, probe, lm, error: BaseException) -> str:
    """One paragraph: the task, the request kind, the server's own message, what to do."""
    status, said = server_message(error)
    if (
        status is None
        and isinstance(error, (KeyError, TypeError, IndexError))
        and probe.request_type == "loglikelihood"
    ):
        said = f"its answer has no usable log-probabilities ({type(error).__name__}: {error})"
    answered = f"HTTP {status}: " if status is not None else ""
    return (
        f"task {task}: the {_backend(lm)} backend could not serve a {kind_name} request, probed once before the "
        f"run ({_shown(probe)}). It answered: {answered}{said}. {_advice(status, error, probe.request_type)}"
    )


def _shown(probe) -> str:
    """The probe request in a few words: its context's end, its continuation or generation settings."""
    context = probe.args[0] if probe.args and isinstance(probe.args[0], str) else ""
    shown = f"{len(context)} characters of context ending {context[-60:]!r}" if context else "an empty context"
    if len(probe.args) > 1 and isinstance(probe.args[1], str):
        shown += f", continuation {probe.args[1][:60]!r}"
    elif len(probe.args) > 1 and isinstance(probe.args[1], dict):
        shown += f", generation settings {json.dumps(probe.args[1], default=str)}"
    return shown


def server_failures() -> tuple[type[BaseException], ...]:
    """The exceptions of a server that failed in the middle of a run (requests' and aiohttp's)."""
    import requests

    found: list[type[BaseException]] = [requests.RequestException]
    try:
        import aiohttp

        found.append(aiohttp.ClientError)
    except ImportError:
        pass
    return tuple(found)


def failure_during_run(error: BaseException, cached: bool) -> str:
    """The paragraph for a server failure after the probes passed (belief-eval prints it)."""
    status, said = server_message(error)
    answered = f"HTTP {status}: " if status is not None else ""
    kept = (
        "every request answered before it is kept in the --use_cache database: run the same command again and "
        "only the rest is sent"
        if cached
        else "nothing answered was kept (the command had --no_answer_cache, or no --output_path): without those, or "
        "with --use_cache PATH, a rerun after a failure sends only what was not answered"
    )
    return (
        f"the backend failed during the run, after every task's probe requests had been answered. It said: "
        f"{answered}{said}. {_advice(status, error, '')}; {kept}"
    )
