"""Requests longer than the model's context: recorded per task, refused where the probe needs its whole context.

The recorded numbers are checked against what the backend itself encoded (its token sequences before it
cuts them), captured while it runs; the refusal is checked as a user sees it (``belief-eval``, exit 2).
"""

from __future__ import annotations

import json

import pytest
from test_mlm_tiny import tiny_dir  # noqa: F401  (fixture)

from belief_tasks.hooks import truncation
from belief_tasks.options import KnobError, Options, parse_options

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------- no model


def test_summary_of_lengths_by_hand():
    cut = truncation.summarize([5, 10, 12, 20, 11], max_length=10)
    # longer than 10: 12 (2 cut), 20 (10 cut), 11 (1 cut)
    assert cut == truncation.Truncation(max_length=10, requests=5, truncated=3, longest=20, max_cut=10, total_cut=13)
    assert truncation.summarize([3, 10], max_length=10).truncated == 0


def test_allow_truncation_is_a_validated_common_knob():
    assert parse_options(Options, {}).allow_truncation is False
    assert parse_options(Options, {"allow_truncation": "true"}).allow_truncation is True
    with pytest.raises(KnobError, match="'allow_truncation': 'maybe' is not true or false"):
        parse_options(Options, {"allow_truncation": "maybe"})


def test_refusal_names_the_task_the_longest_request_and_max_length():
    cut = truncation.Truncation(max_length=96, requests=142, truncated=142, longest=143, max_cut=47, total_cut=5966)
    text = str(truncation.TruncationError("belief_demo_iclke", cut, "its in-context examples"))
    for part in (
        "task belief_demo_iclke",
        "142 of 142 requests",
        "max_length of 96 tokens",
        "the longest has 143",
        "up to 47 tokens",
        "its in-context examples",
        '{"allow_truncation": true} in --metadata',
    ):
        assert part in text


# ---------------------------------------------------------------- lengths as lm-eval's hf encodes them


@pytest.fixture(scope="module")
def hflm(model_path):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(model_path), max_length=32, device="cpu", batch_size=1)


def test_lengths_are_what_hf_feeds_the_model(hflm):
    """loglikelihood: context + continuation - 1 tokens, as ``TemplateLM.loglikelihood`` encodes the pair
    (trailing spaces of the context move to the continuation; an empty context becomes the prefix token);
    generate_until: context tokens + max_gen_toks."""
    from lm_eval.api.instance import Instance

    pairs = [("The capital of France is", " Paris"), ("The capital of France is ", "Paris"), ("", "Paris is big")]
    reqs = [Instance("loglikelihood", {}, p, i) for i, p in enumerate(pairs)]
    reqs.append(Instance("generate_until", {}, ("Q: capital of France?\nA:", {"max_gen_toks": 5}), 3))
    reqs.append(Instance("loglikelihood_rolling", {}, ("never cut",), 4))
    expected = []
    for ctx, cont in pairs:
        if ctx:
            ctx_enc, cont_enc = hflm._encode_pair(ctx, cont)
        else:
            cont_enc = hflm.tok_encode(cont, add_special_tokens=False)
            ctx_enc = [hflm.prefix_token_id]
        expected.append(len(ctx_enc) + len(cont_enc) - 1)
    expected.append(len(hflm.tok_encode("Q: capital of France?\nA:")) + 5)
    assert truncation.request_lengths(hflm, reqs) == expected


def test_hf_mlm_lengths_are_its_texts_with_special_tokens(tiny_dir):  # noqa: F811
    """By hand, on the tiny BERT: [CLS] the x5 mont ##real is a city . [SEP] = 13 tokens, of which its own
    left cut (``_fit``) drops 13 - 8 = 5; [CLS] paris is a [MASK] . [SEP] = 7; [CLS] mont ##real is a
    city . [SEP] = 8."""
    from lm_eval.api.instance import Instance

    from belief_tasks.backends.mlm import HFMaskedLM

    lm = HFMaskedLM(pretrained=str(tiny_dir), dtype="float32", device="cpu", max_length=8)
    reqs = [
        Instance("loglikelihood", {}, ("the the the the the Montreal is", " a city."), 0),
        Instance("mask_topk", {}, ("Paris is a [MASK].", 3), 1),
        Instance("loglikelihood_span", {}, ("Montreal is a city.", 0, 8), 2),
        Instance("loglikelihood_rolling", {}, ("never cut, refused when too long",), 3),
    ]
    assert truncation.request_lengths(lm, reqs) == [13, 7, 8]
    enc = lm._encode("the the the the the Montreal is a city.")
    assert lm._fit(enc["input_ids"], [], enc["special_tokens_mask"])[0] == 13 - 8
    assert truncation.summarize([13, 7, 8], lm.max_length).total_cut == 5


# ---------------------------------------------------------------- what the backend cut, captured


class Seen:
    """Token lengths the backend produced before cutting: pairs (model input: context + continuation - 1)
    and generation contexts (context + room to generate)."""

    def __init__(self):
        self.pairs: dict[tuple, int] = {}
        self.contexts: dict[str, int] = {}

    def length(self, args) -> int:
        if len(args) > 1 and isinstance(args[1], dict):
            return self.contexts[args[0]]
        return self.pairs[tuple(args)]


@pytest.fixture
def seen(monkeypatch):
    from lm_eval.models.huggingface import HFLM

    from belief_tasks.backends import shared

    s = Seen()

    def scored(self, requests, *args, _original=HFLM._loglikelihood_tokens, **kwargs):
        for key, ctx_enc, cont_enc in requests:
            s.pairs[tuple(key)] = len(ctx_enc) + len(cont_enc) - 1
        return _original(self, requests, *args, **kwargs)

    monkeypatch.setattr(HFLM, "_loglikelihood_tokens", scored)
    # hf-shared tokenises (context, continuation) strings round by round (``_score_strings``): the tokens each
    # round hands the model, keyed back to the request's strings
    strings: list = []

    def score_strings(self, args, *rest, _original=shared.HFSharedPrefixLM._score_strings, **kwargs):
        strings[:] = args
        return _original(self, args, *rest, **kwargs)

    def rounds(requests, budget, _original=shared.rounds):
        for part in _original(requests, budget):
            for i, ctx_enc, cont_enc in part:
                s.pairs[tuple(strings[i])] = len(ctx_enc) + len(cont_enc) - 1
            yield part

    monkeypatch.setattr(shared.HFSharedPrefixLM, "_score_strings", score_strings)
    monkeypatch.setattr(shared, "rounds", rounds)
    encode = HFLM.tok_batch_encode

    def batch_encode(self, strings, padding_side="left", left_truncate_len=None, truncation=False):
        if left_truncate_len:
            for text in strings:
                s.contexts[text] = int(encode(self, [text])[0].shape[1]) + self.max_length - left_truncate_len
        return encode(
            self, strings, padding_side=padding_side, left_truncate_len=left_truncate_len, truncation=truncation
        )

    monkeypatch.setattr(HFLM, "tok_batch_encode", batch_encode)
    return s


def expected_record(results: dict, task: str, seen: Seen, max_length: int) -> dict:
    """The truncation entry from the task's logged requests and the lengths the backend encoded."""
    lengths = [seen.length(args) for sample in results["samples"][task] for args in sample["arguments"]]
    cuts = [n - max_length for n in lengths if n > max_length]
    return {
        "max_length": max_length,
        "requests": len(lengths),
        "truncated_requests": len(cuts),
        "longest_request_tokens": max(lengths),
        "max_tokens_cut": max(cuts),
        "total_tokens_cut": sum(cuts),
    }


def recorded(results: dict, task: str) -> dict | None:
    return results["configs"][task]["metadata"].get("truncation")


@pytest.mark.parametrize("backend", ["hf", "hf-shared"])
def test_allow_truncation_runs_and_records_what_the_backend_cut(model_path, seen, backend):
    from harness import evaluate

    task = "belief_demo_iclke"
    res = evaluate(
        [task],
        f"pretrained={model_path},max_length=96",
        model=backend,
        limit=1,
        batch_size=4,
        metadata={"max_options": 3, "allow_truncation": True},
    )
    record = recorded(res, task)
    expected = expected_record(res, task, seen, 96)
    assert record == {**expected, "needs_whole_context": True, "allow_truncation": True}
    assert record["truncated_requests"] == record["requests"] == 3 and record["max_tokens_cut"] > 30


@pytest.mark.parametrize("backend", ["hf", "hf-shared"])
def test_an_allowed_cut_is_recorded_and_an_uncut_task_records_nothing(model_path, seen, backend, tmp_path):
    """MONITOR (loglikelihood and generate_until) at max_length 24 is cut and recorded with the knob;
    BEAR's statements all fit, so its entry has no record. On hf through lm-eval's request cache
    (``--use_cache``), which wraps the model."""
    from harness import evaluate

    cache = {"use_cache": str(tmp_path / "cache")} if backend == "hf" else {}
    res = evaluate(
        ["belief_demo_monitor", "belief_demo_bear"],
        f"pretrained={model_path},max_length=24",
        model=backend,
        limit=1,
        batch_size=4,
        metadata={"max_facts_per_relation": 1, "allow_truncation": True},
        **cache,
    )
    record = recorded(res, "belief_demo_monitor")
    assert record == {
        **expected_record(res, "belief_demo_monitor", seen, 24),
        "needs_whole_context": True,
        "allow_truncation": True,
    }
    assert 0 < record["truncated_requests"] < record["requests"]
    assert recorded(res, "belief_demo_bear") is None


# ---------------------------------------------------------------- belief-eval: what the user sees


@pytest.mark.parametrize("backend", ["hf", "hf-shared"])
def test_a_cut_few_shot_context_is_refused_before_anything_is_scored(model_path, seen, backend):
    from harness import evaluate

    with pytest.raises(truncation.TruncationError, match="task belief_demo_mp_4template: .* its few-shot context"):
        evaluate(["belief_demo_mp_4template"], f"pretrained={model_path},max_length=96", model=backend, limit=1)
    assert not seen.pairs and not seen.contexts  # the backend encoded nothing: no forward pass ran


@pytest.mark.parametrize("backend", ["hf", "hf-shared"])
def test_belief_eval_refuses_cut_in_context_examples_in_one_paragraph(model_path, tmp_path, backend):
    from harness import run_cli

    task = "belief_demo_iclke"
    out = run_cli(
        [
            "--model",
            backend,
            "--model_args",
            f"pretrained={model_path},max_length=96",
            "--tasks",
            task,
            "--metadata",
            json.dumps({"source": "sample"}),
            "--limit",
            "1",
            "--output_path",
            str(tmp_path / "out"),
        ],
        timeout=600,
        OMP_NUM_THREADS="1",
    )
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1, out.stderr[-3000:]
    for part in (
        "stopped before scoring",
        f"task {task}:",
        "longer than the model's max_length of 96 tokens",
        "the longest has",
        "its in-context examples",
        '{"allow_truncation": true}',
    ):
        assert part in lines[0], lines[0]
    assert "Traceback" not in out.stderr and "Running loglikelihood requests" not in out.stderr
    assert not (tmp_path / "out").exists()


def test_the_report_shows_the_recorded_cut(model_path, tmp_path):
    from belief_tasks.report import build_report

    from harness import run_cli

    out = run_cli(
        [
            "--model",
            "hf-shared",
            "--model_args",
            f"pretrained={model_path},max_length=96",
            "--tasks",
            "belief_demo_iclke",
            "--limit",
            "1",
            "--log_samples",
            "--output_path",
            str(tmp_path / "out"),
            "--metadata",
            json.dumps({"source": "sample", "max_options": 3, "allow_truncation": True}),
        ],
        timeout=600,
        OMP_NUM_THREADS="1",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    record = results["configs"]["belief_demo_iclke"]["metadata"]["truncation"]
    report = build_report([tmp_path / "out"], tmp_path / "report")
    line = (
        f"belief_demo_iclke: 3 of 3 requests longer than max_length 96 (longest "
        f"{record['longest_request_tokens']} tokens); up to {record['max_tokens_cut']} tokens cut from one "
        f"request, {record['total_tokens_cut']} in all; this probe needs its whole context and ran only "
        "because allow_truncation was set"
    )
    assert line in report.path.read_text()
    assert any(s.startswith("truncated: ") and line in s for s in report.summary)


# ---------------------------------------------------------------- several processes (accelerate launch, CPU)


@pytest.mark.e2e
def test_processes_of_one_launch_record_and_refuse_together(tiny_model_path, tmp_path):
    """Each process builds only its share of the documents; the record combines them all, and every
    process refuses alike (none is left waiting for the others in a collective). The record counts tokens, so a
    tiny random model with the bundled tokenizer serves."""
    model_path = tiny_model_path
    from test_scale_runs import accelerate_cpu, cli

    def args(out, task="belief_demo_monitor", max_length=24, allow=True):
        return [
            "--model",
            "hf-shared",
            "--model_args",
            f"pretrained={model_path},max_length={max_length},dtype=float32",
            "--device",
            "cpu",
            "--tasks",
            task,
            "--limit",
            "2",
            "--output_path",
            str(out),
            "--metadata",
            json.dumps({"source": "sample", "max_facts_per_relation": 1, "allow_truncation": allow}),
        ]

    def record(out):
        results = json.loads(next(out.rglob("results_*.json")).read_text())
        return results["configs"]["belief_demo_monitor"]["metadata"]["truncation"]

    cli(args(tmp_path / "one"))
    cli(args(tmp_path / "two"), launcher=accelerate_cpu(2))
    assert record(tmp_path / "two") == record(tmp_path / "one")
    assert record(tmp_path / "one")["truncated_requests"] > 0

    iclke = args(tmp_path / "iclke", "belief_demo_iclke", 96, allow=False)
    returncode, lines, stderr = refused_by_two_processes(["-m", "belief_tasks.commands.belief_eval", *iclke])
    assert returncode != 0
    assert len(lines) == 2 and lines[0] == lines[1], stderr[-3000:]  # one per process, the same numbers


def refused_by_two_processes(args: list[str], timeout: int = 600, **env: str) -> tuple[int, list[str], str]:
    """``python ARGS`` under a two-process CPU launch: its exit code, the lines in which its processes refused
    before scoring, and its standard error."""
    import subprocess

    from test_scale_runs import accelerate_cpu

    from harness import ROOT, env_with_checkout

    run = subprocess.run(
        [*accelerate_cpu(2), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
        env=env_with_checkout(OMP_NUM_THREADS="1", **env),
    )
    lines = [line for line in run.stderr.splitlines() if line.startswith("belief-eval: stopped before scoring")]
    return run.returncode, lines, run.stderr


REFUSE_LATE = """
import time

import torch.distributed as dist

from belief_tasks.commands import belief_eval
from belief_tasks.hooks.truncation import TruncationError, summarize

dist.init_process_group("gloo")
say = belief_eval.say_paragraph
if dist.get_rank() == 0:  # the main process is slower to its paragraph (it closes lm-eval's bars first)
    belief_eval.say_paragraph = lambda text: (time.sleep(3), say(text))
cut = summarize([30], 24)
belief_eval.refuse(TruncationError("belief_demo_iclke", cut, "its in-context examples"), stage="scoring")
"""


def test_a_process_that_refuses_first_waits_for_the_others_paragraphs(tmp_path):
    """The launcher stops every process once one exits with an error: a process that refuses first waits until
    all have said their paragraph (stop 54's CI saw one paragraph of two). Here the main process is 3 s late."""
    from harness import ROOT

    script = tmp_path / "refuse_late.py"
    script.write_text(REFUSE_LATE)
    returncode, lines, stderr = refused_by_two_processes([str(script)], timeout=300, PYTHONPATH=str(ROOT))
    assert returncode != 0
    assert len(lines) == 2 and lines[0] == lines[1], stderr[-3000:]
    assert "1 of 1 requests are longer than the model's max_length of 24" in lines[0]
