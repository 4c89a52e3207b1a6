"""A server that cannot serve a request is named before the long run; under --use_cache nothing answered
is asked again; requests are measured against an API model's context (``belief_tasks.hooks.truncation``).

Every server here is a real HTTP server on 127.0.0.1 (``fake_server.FakeServer``), started and stopped by
the test, spoken to by lm-eval's own ``local-completions`` backend; the model's tokenizer is the bundled one.
"""

from __future__ import annotations

import json

import pytest

from belief_tasks.hooks import truncation
from belief_tasks.hooks.preflight import PreflightError

from fake_server import SEED_MESSAGE, FakeServer, closed_port_url

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def api_args(model_path, url: str, **extra) -> str:
    args = {
        "model": "fake-model",
        "base_url": url,
        "tokenizer_backend": "huggingface",
        "tokenizer": str(model_path),
        "max_retries": 1,
        **extra,
    }
    return ",".join(f"{k}={v}" for k, v in args.items())


def run(tasks, model_args, **kwargs) -> dict:
    from harness import evaluate

    return evaluate(tasks, model_args, model="local-completions", batch_size=1, **kwargs)


# ---------------------------------------------------------------- named before the run


def test_a_refused_connection_is_named_before_the_run(model_path):
    url = closed_port_url()
    with pytest.raises(PreflightError) as caught:
        run(["belief_demo_bear"], api_args(model_path, url), limit=1)
    text = str(caught.value)
    for part in (
        "task belief_demo_bear:",
        f"LocalCompletionsAPI at {url}",
        "could not serve a loglikelihood request",
        "probed once before the run",
        "ConnectionError",
        "Nothing answered there: start the server",
    ):
        assert part in text, text
    assert "\n" not in text


def test_sampled_requests_the_server_refuses_stop_before_the_run_with_its_message(model_path):
    """BELIEF-ICL sends greedy and seeded sampled generations: the sampled kind is probed on its own, and the
    server's 400 comes back in its own words. Only the probes reached the server."""
    with FakeServer() as server:
        server.refuse_sampled = True
        with pytest.raises(PreflightError) as caught:
            run(
                ["belief_mp_4template"],
                api_args(model_path, server.url),
                limit=1,
                metadata={"confidence_samples": 2, "max_facts_per_relation": 1},
            )
        text = str(caught.value)
        for part in (
            "task belief_mp_4template:",
            "generate_until (sampled, with its own seed) request",
            f"It answered: HTTP 400: {SEED_MESSAGE}.",
            "the server refused the request as sent",
            '"do_sample": true',
            '"seed": ',
        ):
            assert part in text, text
        assert server.received == 2  # the greedy probe (answered), the sampled probe (refused); nothing else
        assert server.answered == 1


def test_a_server_without_logprobs_is_named_for_loglikelihood(model_path):
    with FakeServer() as server:
        server.no_logprobs = True
        with pytest.raises(PreflightError) as caught:
            run(["belief_demo_bear"], api_args(model_path, server.url), limit=1)
        text = str(caught.value)
        assert "could not serve a loglikelihood request" in text and "has no usable log-probabilities" in text, text
        assert "echo=true with logprobs" in text, text
        assert server.received == 1


def test_belief_eval_prints_the_failure_in_one_paragraph(model_path, tmp_path):
    from harness import run_cli

    out = run_cli(
        [
            "--model",
            "local-completions",
            "--model_args",
            api_args(model_path, closed_port_url()),
            "--tasks",
            "belief_demo_bear",
            "--limit",
            "1",
            "--output_path",
            str(tmp_path / "out"),
            "--metadata",
            json.dumps({"source": "sample"}),
        ],
        timeout=600,
        OMP_NUM_THREADS="1",
    )
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1 and "stopped before scoring. task belief_demo_bear:" in lines[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr


def test_belief_eval_names_a_failure_during_the_run_and_what_was_kept(model_path, tmp_path):
    from harness import run_cli

    with FakeServer() as server:
        server.fail_after = 5
        out = run_cli(
            [
                "--model",
                "local-completions",
                "--model_args",
                api_args(model_path, server.url),
                "--tasks",
                "belief_demo_bear",
                "--limit",
                "1",
                "--use_cache",
                str(tmp_path / "cache"),
                "--metadata",
                json.dumps({"source": "sample"}),
            ],
            timeout=600,
            OMP_NUM_THREADS="1",
        )
    assert out.returncode == 1, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1, out.stderr[-3000:]
    for part in (
        "failed during the run",
        "HTTP 503: the engine is gone (fake failure)",
        "kept in the --use_cache database: run the same command again",
    ):
        assert part in lines[0], lines[0]
    assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- nothing lost


def test_a_rerun_after_a_failure_sends_only_what_was_not_answered(model_path, tmp_path):
    """lm-eval's --use_cache (CachingLM, SqliteDict with autocommit) keeps each answer as local-completions
    hands it over (``cache_hook.add_partial``), so a failure after N answers keeps those N: the rerun asks the
    server for none of them, and its results are the uninterrupted run's."""
    import requests

    cache = str(tmp_path / "cache" / "run")
    with FakeServer() as clean:
        expected = run(["belief_demo_bear"], api_args(model_path, clean.url), limit=2)
        distinct = {tuple(p) for p in clean.prompts}
    assert len(clean.prompts) == len(distinct) + 1  # no cache: the probe is asked again in the run

    with FakeServer() as failing:
        failing.fail_after = 25
        with pytest.raises(requests.HTTPError, match="503"):
            run(["belief_demo_bear"], api_args(model_path, failing.url), limit=2, use_cache=cache)
        first = {tuple(p) for p in failing.prompts}
    assert failing.answered == 25 and len(first) == 25  # the probe's answer was cached and not asked again

    with FakeServer() as resumed:
        res = run(["belief_demo_bear"], api_args(model_path, resumed.url), limit=2, use_cache=cache)
        second = [tuple(p) for p in resumed.prompts]
    assert len(second) == len(set(second)) == len(distinct) - 25
    assert not first & set(second) and first | set(second) == distinct
    same = lambda r: json.dumps(r["results"]["belief_demo_bear"], sort_keys=True)  # noqa: E731  (NaN == NaN)
    assert same(res) == same(expected)


# ---------------------------------------------------------------- the context of an API model


def _pair_prompts(server) -> list[int]:
    return [len(p) for p in server.prompts]


def test_api_requests_are_measured_as_lm_eval_sends_them(model_path):
    """A log-likelihood holds its tokens + the one token the payload asks the server for: with a max_length that
    cuts nothing, the longest recorded request is the longest prompt the server received + 1. The server reports
    no context of its own, so the results JSON says so."""
    with FakeServer() as server:
        res = run(
            ["belief_demo_iclke"],
            api_args(model_path, server.url, max_length=4096),
            limit=1,
            metadata={"max_options": 3},
        )
    record = res["configs"]["belief_demo_iclke"]["metadata"]["truncation"]
    assert record["longest_request_tokens"] == max(_pair_prompts(server)) + 1
    assert record["truncated_requests"] == 0 and record["max_length"] == 4096
    assert record["server_max_model_len"] == "unknown" and record["max_length_from"] == truncation.API_SOURCE


def test_api_cut_is_refused_then_recorded_as_lm_eval_cuts(model_path):
    with FakeServer() as server:
        with pytest.raises(truncation.TruncationError, match="max_length of 96 tokens"):
            run(
                ["belief_demo_iclke"],
                api_args(model_path, server.url, max_length=96),
                limit=1,
                metadata={"max_options": 3},
            )
        assert server.received == 0
        res = run(
            ["belief_demo_iclke"],
            api_args(model_path, server.url, max_length=96),
            limit=1,
            metadata={"max_options": 3, "allow_truncation": True},
        )
    record = res["configs"]["belief_demo_iclke"]["metadata"]["truncation"]
    assert record["truncated_requests"] == record["requests"] == 3 and record["max_length"] == 96
    assert max(_pair_prompts(server)) == 96 - 1  # lm-eval kept max_length - 1 tokens, as measured


def test_a_server_context_shorter_than_max_length_stops_before_any_request(model_path):
    with FakeServer(max_model_len=128) as server:
        with pytest.raises(truncation.ServerContextError) as caught:
            run(["belief_demo_iclke"], api_args(model_path, server.url), limit=1, metadata={"max_options": 3})
        assert server.received == 0
    text = str(caught.value)
    assert "longer than the server's context of 128 tokens" in text and "max_length=128" in text, text


def test_a_server_context_that_holds_every_request_records_nothing(model_path):
    with FakeServer(max_model_len=8192) as server:
        res = run(["belief_demo_bear"], api_args(model_path, server.url, max_length=8192), limit=1)
    assert "truncation" not in res["configs"]["belief_demo_bear"]["metadata"]


def test_without_a_tokenizer_the_context_is_recorded_as_unknown(model_path):
    with FakeServer() as server:
        res = run(["belief_demo_qa_4template"], api_args(model_path, server.url, tokenizer_backend="none"), limit=1)
    record = res["configs"]["belief_demo_qa_4template"]["metadata"]["truncation"]
    assert record["context_length"] == "unknown" and "no tokenizer" in record["reason"]
    assert record["requests"] == len(res["samples"]["belief_demo_qa_4template"][0]["arguments"])


def test_a_paragraph_begins_its_own_line_below_an_open_progress_bar(capsys):
    """lm-eval's request bar ends without a newline, and the run's watchdog redraws it after each of its lines:
    the refusal closes it first, so its paragraph is a line of its own (this once failed in CI as a race)."""
    from tqdm import tqdm

    from belief_tasks.commands.belief_eval import refuse

    bar = tqdm(total=3, desc="Requesting API")  # drawn at once, on the captured stderr
    tqdm.write("belief-eval progress: building requests took 1 s")  # as the watchdog does: the bar is redrawn
    with pytest.raises(SystemExit) as stopped:
        refuse(ValueError("the server is down"), task="belief_demo_bear", stage="scoring")
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "belief-eval: stopped" in line]
    assert stopped.value.code == 2 and len(lines) == 1
    assert lines[0].startswith("belief-eval: stopped before scoring. task belief_demo_bear: the server is down.")
    assert "Requesting API" in err and bar not in getattr(tqdm, "_instances", ())  # drawn, then closed
