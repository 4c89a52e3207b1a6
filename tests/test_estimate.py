"""``belief-eval --estimate``: a command's requests and tokens counted before the model loads, against what the
backend itself computes for the same requests, and the command line (no model loaded, bad input refused,
calibration stored and used)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from belief_tasks.backends.prefix_tree import build_prefix_tree, tree_cost
from belief_tasks.planning.cost import GREEDY, LOGLIKELIHOOD, SAMPLED, Encoder, count_task

from harness import run_cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: small but every kind: BEAR's empty contexts, IC-LKE's long ones, MONITOR's growing prefixes and greedy
#: answers, BELIEF-ICL's greedy answers and seeded samples
TASKS = ["belief_demo_bear", "belief_demo_iclke", "belief_demo_monitor", "belief_demo_mp_4template"]
METADATA = {"source": "sample", "relations": "P36,P19"}


@pytest.fixture(scope="module")
def shared_lm(model_path):
    import belief_tasks

    belief_tasks.install()
    from belief_tasks.backends.shared import HFSharedPrefixLM

    return HFSharedPrefixLM(pretrained=str(model_path), dtype="float32", device="cpu", batch_size=8)


def built_tasks(model_path) -> dict:
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(
        include_path=str(task_yamls_dir()), include_defaults=False, metadata={**METADATA, "pretrained": str(model_path)}
    )
    tasks = tm.load(TASKS)["tasks"]
    for task in tasks.values():
        task.build_all_requests(limit=None, rank=0, world_size=1)
    return tasks


def backend_rows(lm, instances) -> list[list[int]]:
    """The token rows hf-shared forwards for these log-likelihood requests: lm-eval's own encoding
    (``TemplateLM.loglikelihood``'s, ``requests.encode_requests``), then hf-shared's requests (``_token_requests``),
    nothing scored."""
    from belief_tasks.requests import encode_requests

    reqs, _ = lm._token_requests(encode_requests(lm, [i.args for i in instances]))
    return [r.inputs for r in reqs]


def test_counts_equal_the_tokens_the_backend_computes(model_path, shared_lm):
    """Per task: requests by kind as lm-eval built them; log-likelihood tokens without sharing = the rows stock
    hf forwards, with sharing = hf-shared's radix-tree plan over the same rows; generation prompts = the backend's
    own encoding, once per request without sharing, once per prompt with it; generated = max_gen_toks each."""
    lm = shared_lm
    encoder = Encoder(lm.tokenizer, lm.max_length)
    seen = set()
    for name, task in built_tasks(model_path).items():
        cost = count_task(task, encoder, task.FAMILY)
        kinds = Counter()
        for inst in task.instances:
            sampled = inst.request_type == "generate_until" and inst.args[1].get("do_sample")
            kinds[SAMPLED if sampled else GREEDY if inst.request_type == "generate_until" else inst.request_type] += 1
        assert {k: v.requests for k, v in cost.kinds.items()} == dict(kinds), name
        ll = [i for i in task.instances if i.request_type == "loglikelihood"]
        if ll:
            rows = backend_rows(lm, ll)
            assert cost.kinds[LOGLIKELIHOOD].tokens == sum(map(len, rows)), name
            plan = tree_cost(build_prefix_tree(rows, min_saving=lm.min_shared_tokens), rows)
            assert cost.kinds[LOGLIKELIHOOD].shared_tokens == plan, name
            assert plan < sum(map(len, rows))  # every one of these tasks shares prefixes
        for kind in (GREEDY, SAMPLED):
            gen = [
                i
                for i in task.instances
                if i.request_type == "generate_until" and bool(i.args[1].get("do_sample")) == (kind == SAMPLED)
            ]
            if not gen:
                continue
            prompts = [i.args[0] for i in gen]
            _, mask = lm.tok_batch_encode(prompts)
            n = dict(zip(prompts, mask.sum(dim=1).tolist()))
            assert cost.kinds[kind].tokens == sum(n[p] for p in prompts), (name, kind)
            assert cost.kinds[kind].prompts == len(set(prompts))
            assert cost.kinds[kind].generated == sum(i.args[1]["max_gen_toks"] for i in gen)
        seen |= set(cost.kinds)
    assert seen == {LOGLIKELIHOOD, GREEDY, SAMPLED}
    # a sampled prompt is also answered greedily: hf-shared prefills it once for both, so its samples add none
    mp = count_task(built_tasks(model_path)["belief_demo_mp_4template"], encoder, "belief_icl")
    assert mp.kinds[SAMPLED].shared_tokens == 0 and mp.kinds[SAMPLED].tokens > 0


def test_the_two_level_plan_of_long_contexts_is_the_one_trees_within_a_percent(model_path, shared_lm, monkeypatch):
    """Above ``EXACT_TOKENS`` the tree is planned per context (IC-LKE's 50 demonstrations are held once, not once
    per option); on IC-LKE and MONITOR it stays within a percent of the exact plan."""
    from belief_tasks.planning import cost as cost_module

    encoder = Encoder(shared_lm.tokenizer, shared_lm.max_length)
    tasks = built_tasks(model_path)
    for name in ("belief_demo_iclke", "belief_demo_monitor"):
        exact = count_task(tasks[name], encoder).kinds[LOGLIKELIHOOD].shared_tokens
        monkeypatch.setattr(cost_module, "EXACT_TOKENS", 0)
        two_level = count_task(tasks[name], encoder).kinds[LOGLIKELIHOOD].shared_tokens
        monkeypatch.setattr(cost_module, "EXACT_TOKENS", 2_000_000)
        assert abs(two_level - exact) <= 0.01 * exact, (name, exact, two_level)


def test_block_counts_are_vllm_shared_passes_over_lm_evals_encoding(model_path, shared_lm, monkeypatch):
    """On ``vllm-shared`` the tokens computed with sharing are its passes at the engine's block size
    (``prefix_cache_plan.simulate``) over the requests as lm-eval encodes and cuts them (``encode_request``,
    ``max_length - 1`` tokens); above ``EXACT_TOKENS``, one plan per run of contexts of an eighth of it, on one
    cache, stays within 2 % of the one plan (here with four or more runs per task)."""
    from belief_tasks.backends.prefix_cache_plan import simulate
    from belief_tasks.planning import cost as cost_module
    from belief_tasks.planning.rates import BLOCKS
    from belief_tasks.requests import encode_request

    encoder = Encoder(shared_lm.tokenizer, shared_lm.max_length)
    tasks = built_tasks(model_path)
    keep = shared_lm.max_length - 1
    for name in ("belief_demo_iclke", "belief_demo_monitor", "belief_demo_bear"):
        ll = [i for i in tasks[name].instances if i.request_type == "loglikelihood"]
        pairs = [encode_request(shared_lm, *i.args[:2]) for i in ll]
        seqs = [(c + t)[-keep:] for c, t in pairs]
        ctxlens = [len(c) - max(0, len(c) + len(t) - keep) for c, t in pairs]
        whole = sum(map(len, seqs))  # without a cache read
        for block in (16, 32):
            exact = simulate(seqs, ctxlens, block).computed_tokens
            counted = count_task(tasks[name], encoder, sharing=BLOCKS, block_size=block).kinds[LOGLIKELIHOOD]
            assert counted.shared_tokens == exact, (name, block)
            if name == "belief_demo_iclke":  # 50 demonstrations read from the cache by each option
                assert exact < whole / 5
            monkeypatch.setattr(cost_module, "EXACT_TOKENS", whole // 4)  # runs of whole / 32 tokens
            streamed = count_task(tasks[name], encoder, sharing=BLOCKS, block_size=block).kinds[LOGLIKELIHOOD]
            monkeypatch.setattr(cost_module, "EXACT_TOKENS", 2_000_000)
            assert abs(streamed.shared_tokens - exact) <= 0.02 * exact, (name, block, exact, streamed.shared_tokens)


def estimate_args(model_path, *tasks: str, metadata: dict | None = None) -> list[str]:
    return [
        "--model",
        "hf-shared",
        "--model_args",
        f"pretrained={model_path},dtype=float32",
        "--batch_size",
        "8",
        "--tasks",
        ",".join(tasks),
        "--metadata",
        json.dumps(metadata or METADATA),
    ]


def test_estimate_prints_the_cost_and_loads_no_model(model_path, tmp_path):
    rates = tmp_path / "rates.json"
    out = run_cli(
        [
            "--estimate",
            *estimate_args(model_path, "belief_demo_bear", "belief_demo_monitor"),
            "--estimate_json",
            str(tmp_path / "e.json"),
        ],
        BELIEF_RATES=str(rates),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "| belief_demo_bear | 4 |" in out.stdout and "nothing was scored" in out.stdout
    assert "FLOP projection, not a measurement" in out.stdout  # no rate stored yet
    assert "Initializing hf-shared model" not in out.stderr
    stored = json.loads(rates.read_text())  # no model rate: only the command's projected phases, for its run
    assert stored["models"] == {} and len(stored["commands"]) == 1
    e = json.loads((tmp_path / "e.json").read_text())
    bear = next(t for t in e["tasks"] if t["task"] == "belief_demo_bear")
    assert bear["facts"] == 4 and bear["docs"] == 4  # 2 facts of each relation, BEAR's first template
    assert e["shared_facts"] == [{"a": "belief_demo_bear", "b": "belief_demo_monitor", "facts": 4}]
    assert set(e["phases"]) >= {
        "startup",
        "building tasks",
        "loading the model",
        "scoring log-likelihoods",
        "generating answers and samples",
        "recording and aggregating results",
        "writing results",
    }


def test_estimate_refuses_bad_input_as_a_run_does(model_path, tmp_path):
    out = run_cli(
        [
            "--estimate",
            *estimate_args(model_path, "belief_demo_bear", metadata={"source": "sample", "max_facts_per_relaton": 2}),
        ]
    )
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1 and "did you mean 'max_facts_per_relation'" in lines[0]


def test_calibration_is_stored_and_the_next_estimate_uses_it(tiny_model_path, tmp_path):
    rates = tmp_path / "rates.json"
    args = estimate_args(tiny_model_path, "belief_demo_bear", "belief_demo_mp_4template")
    out = run_cli(["--estimate", "--calibrate", *args], BELIEF_RATES=str(rates))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "calibration: bear loglikelihood:" in out.stdout and "calibration: belief_icl generate_until:" in out.stdout
    stored = json.loads(rates.read_text())["models"]
    (entry,) = stored.values()
    assert entry["source"] == "calibration" and entry["model_load_s"] > 0
    assert set(entry["per_unit"]) == {"bear|loglikelihood", "belief_icl|generate_until"}
    again = run_cli(["--estimate", *args], BELIEF_RATES=str(rates))
    assert again.returncode == 0 and "calibration of" in again.stdout and "FLOP projection" not in again.stdout


def test_a_run_shows_every_phase_and_stores_its_rates(tiny_model_path, tmp_path):
    rates = tmp_path / "rates.json"
    args = estimate_args(tiny_model_path, "belief_demo_bear", "belief_demo_monitor")
    out = run_cli([*args, "--output_path", str(tmp_path / "out"), "--log_samples"], BELIEF_RATES=str(rates))
    assert out.returncode == 0, out.stderr[-3000:]
    progress_lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval progress: ")]
    # every phase ends once, in order ("<phase> took <time> (estimated <time>)"), whenever its end is polled
    parts = [part for line in progress_lines for part in line.split(": ", 1)[1].split("; ")]
    ended = [part.split(" took ")[0] for part in parts if " took " in part and not part.startswith("the estimated")]
    assert ended == [
        "startup",
        "building tasks",
        "loading the model",
        "building requests",
        "scoring log-likelihoods",
        "generating answers and samples",
        "recording and aggregating results",
        "writing results",
    ], progress_lines
    counted = next(i for i, line in enumerate(progress_lines) if ": counted " in line)
    first_scoring = next(i for i, line in enumerate(progress_lines) if "scoring log-likelihoods" in line)
    assert counted < first_scoring  # the first scoring phase's line waits for the plan of the counted requests
    assert any("scoring log-likelihoods took" in part and "(estimated " in part for part in parts)
    assert "finished in" in progress_lines[-1]
    stored = json.loads(rates.read_text())
    (entry,) = stored["models"].values()
    assert entry["source"] == "run" and {
        "bear|loglikelihood",
        "monitor|loglikelihood",
        "monitor|generate_until",
    } <= set(entry["per_unit"])
    assert stored["harness"]  # this machine's harness rates
    again = run_cli(["--estimate", *args], BELIEF_RATES=str(rates))
    assert again.returncode == 0 and "run of" in again.stdout
    assert "harness rates measured on this machine" in again.stdout
