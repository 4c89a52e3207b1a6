"""vLLM's CPU startup failures in our words (``backends/vllm_cpu.py``): for each known failure, the real engine
refuses the settings (vLLM's own message, in its engine process's log), and ``startup_problem`` names the setting
that fixes it and the page that lists them, before any engine starts; ``belief-eval`` prints that paragraph instead
of vLLM's traceback. The settings the other engine tests use pass the check (every ``vllm-shared`` engine of the
session is built through it)."""

from __future__ import annotations

import pytest

from engine_runs import ENGINE_ARGS, require_vllm, set_cpu_env

require_vllm()

#: name -> (model arguments over the engine tests', environment (None: unset), vLLM's words, ours)
FAILURES = {
    # 1.0 reserves all of the machine's memory, which is never all free: refused before anything is allocated
    "memory fraction": (
        {"gpu_memory_utilization": 1.0},
        {"VLLM_CPU_KVCACHE_SPACE": None},
        "on startup is less than desired CPU memory utilization",
        "Set VLLM_CPU_KVCACHE_SPACE",
    ),
    "KV cache larger than the free memory": (
        {},
        {"VLLM_CPU_KVCACHE_SPACE": "4096"},
        "on kv cache allocation is less than requested memory for kv",
        "Give VLLM_CPU_KVCACHE_SPACE=",
    ),
    # the bundled model's 8,192 tokens take 377 MB in float32: 100 MB hold fewer
    "KV cache too small for the context": (
        {"kv_cache_memory_bytes": 100_000_000, "max_model_len": None},
        {"VLLM_CPU_KVCACHE_SPACE": None},
        "KV cache is needed, which is larger than the available KV cache memory",
        "max_model_len=1920 or less",  # vLLM: "the estimated maximum model length is 1920"
    ),
    "block size": ({"block_size": 16}, {"VLLM_CPU_KVCACHE_SPACE": "1"}, "No common block size for 16", "block_size=32"),
}


def _settings(model_path, case: str, monkeypatch) -> dict:
    over, env, _, _ = FAILURES[case]
    set_cpu_env(in_process=True)  # in process, the engine runs the checks it runs in a process of its own
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    args = {"pretrained": str(model_path), **ENGINE_ARGS, **over}
    return {k: v for k, v in args.items() if v is not None}


@pytest.mark.parametrize("case", list(FAILURES))
def test_the_engine_refuses_and_we_say_so_first(case, model_path, monkeypatch, capfd):
    from vllm import LLM

    from belief_tasks.backends.vllm_cpu import startup_problem

    args = _settings(model_path, case, monkeypatch)
    ours = startup_problem(args)
    print(f"\n{case}: {ours}")
    assert ours and FAILURES[case][3] in ours and 'docs/backends_support.md ("vLLM on CPU")' in ours
    engine_args = {("model" if k == "pretrained" else k): v for k, v in args.items()}
    capfd.readouterr()
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the engine process fails; the parent says so
        LLM(**engine_args)
    said = capfd.readouterr()
    assert FAILURES[case][2] in said.err + said.out + str(raised.value)


def test_the_engine_tests_settings_pass(model_path, monkeypatch):
    from belief_tasks.backends.vllm_cpu import startup_problem

    set_cpu_env()
    assert startup_problem({"pretrained": str(model_path), **ENGINE_ARGS}) is None


def test_belief_eval_names_it_before_the_tasks_are_built(model_path):
    """The issue's case, ``--model vllm`` with vLLM's memory fraction and no KV cache size, at 1.0 (a fraction that
    always fails here: the default 0.92 may fit a quiet machine, which would then lose 92 % of its memory): one
    paragraph, exit 2, no traceback, nothing built."""
    from harness import run_cli

    r = run_cli(
        [
            "--model",
            "vllm",
            "--model_args",
            f"pretrained={model_path},dtype=float32,enforce_eager=True,gpu_memory_utilization=1.0",
            "--tasks",
            "belief_demo_bear",
            "--metadata",
            '{"source": "sample"}',
            "--limit",
            "1",
        ],
        timeout=600,
        VLLM_CPU_KVCACHE_SPACE="",
    )
    print(r.stderr[-1500:])
    assert r.returncode == 2, r.stderr[-3000:]
    assert "--model vllm: vLLM's CPU engine would not start" in r.stderr and "gpu_memory_utilization" in r.stderr
    assert "python -m belief_tasks docs backends_support" in r.stderr
    assert "Traceback" not in r.stderr and "Building the tasks" not in r.stderr
