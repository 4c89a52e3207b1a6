"""The rate store (``belief_tasks.planning.rates``): what a run and a calibration leave, how a shared machine's load
rescales them, and the units a backend computes. Pure: no model."""

from __future__ import annotations

import pytest

from belief_tasks.planning import rates
from belief_tasks.planning.rates import Store


def test_units_count_the_tokens_a_backend_computes():
    ll = {"tokens": 1000, "shared_tokens": 100, "generated": 0}
    gen = {"tokens": 500, "shared_tokens": 50, "generated": 160}
    assert rates.units(ll, "loglikelihood", "hf-shared") == 100  # its radix tree
    assert rates.units(ll, "loglikelihood", "hf") == 1000  # every row whole
    assert rates.units(ll, "loglikelihood", "vllm") == 1000  # no prefix cache with prompt log-probabilities
    assert rates.units(gen, "generate_until", "vllm") == 50 + 160  # its prefix cache serves generation
    assert rates.units(gen, "generate_until", "hf") == 500 + 160


def test_a_first_run_gives_every_family_its_phase_rate(tmp_path):
    store = Store(tmp_path / "r.json")
    r = store.record_run("k", "model", {"loglikelihood": (30.0, {"bear": 1000, "iclke": 2000})}, 5.0, matmul=1e11)
    assert r.per_unit == {"bear|loglikelihood": 0.01, "iclke|loglikelihood": 0.01} and r.model_load_s == 5.0
    store.save()
    again = Store.load(tmp_path / "r.json").models["k"]
    assert again.per_unit == r.per_unit and again.matmul == 1e11 and again.source == "run"


def test_a_later_run_rescales_the_family_rates_of_its_phase_together(tmp_path):
    store = Store(tmp_path / "r.json")
    store.record_calibration("k", "model", {"bear|loglikelihood": 0.01, "iclke|loglikelihood": 0.03}, 4.0, matmul=1e11)
    # projected 0.01 * 1000 + 0.03 * 1000 = 40 s; measured 60 s: both rates 1.5x, their ratio kept
    r = store.record_run("k", "model", {"loglikelihood": (60.0, {"bear": 1000, "iclke": 1000})}, None, matmul=1e11)
    assert r.per_unit["bear|loglikelihood"] == pytest.approx(0.015)
    assert r.per_unit["iclke|loglikelihood"] == pytest.approx(0.045)
    assert r.model_load_s == 4.0  # not measured again: kept


def test_a_family_a_run_meets_first_gets_the_time_its_known_families_leave(tmp_path):
    store = Store(tmp_path / "r.json")
    store.record_calibration("k", "model", {"bear|loglikelihood": 0.01}, None)
    # bear projected 10 s of the 1000 + 1000 units; measured 40 s shared by units: bear's half is 20 s
    r = store.record_run("k", "model", {"loglikelihood": (40.0, {"bear": 1000, "monitor": 1000})}, None)
    assert r.per_unit["bear|loglikelihood"] == pytest.approx(0.02)
    assert r.per_unit["monitor|loglikelihood"] == pytest.approx(0.02)  # the phase's pooled rate


def test_a_loaded_machine_scales_rates_by_its_matmul_rate():
    assert rates.contention(1e11, 2.5e10) == 4.0  # a quarter of the speed: four times the time
    assert rates.contention(2.5e10, 1e11) == 0.25
    assert rates.contention(None, 1e11) == 1.0 and rates.contention(1e11, None) == 1.0
    assert rates.contention(1e12, 1e9) == rates.MAX_SCALE  # clamped


def test_rates_measured_under_load_are_stored_at_the_new_speed(tmp_path):
    store = Store(tmp_path / "r.json")
    store.record_calibration("k", "model", {"bear|loglikelihood": 0.01}, None, matmul=1e11)
    # a run at a quarter of the speed: the old rate is first scaled to 0.04 s/unit, which the run then confirms
    r = store.record_run("k", "model", {"loglikelihood": (40.0, {"bear": 1000})}, None, matmul=2.5e10)
    assert r.per_unit["bear|loglikelihood"] == pytest.approx(0.04) and r.matmul == 2.5e10


def test_command_keys_ignore_where_results_go():
    a = rates.command_key(["--model", "hf", "--tasks", "t", "--output_path", "x", "--log_samples"])
    b = rates.command_key(["--model", "hf", "--tasks", "t", "--output_path=y"])
    c = rates.command_key(["--model", "hf", "--tasks", "u"])
    assert a == b != c


def test_a_store_keeps_its_newest_commands(tmp_path):
    store = Store(tmp_path / "r.json")
    for i in range(rates.MAX_COMMANDS + 5):
        store.record_command(f"c{i}", {"startup": float(i)})
    assert len(store.commands) == rates.MAX_COMMANDS and "c0" not in store.commands
    assert store.commands[f"c{rates.MAX_COMMANDS + 4}"] == {"startup": rates.MAX_COMMANDS + 4.0}


def test_a_first_estimate_on_vllm_adds_the_engine_start_to_the_weights(tmp_path):
    """Without a measured load, the model loads in its weights' size at the machine's rate; a backend that starts
    vLLM's offline engine (``needs_vllm``) adds the engine's start; an earlier run's measured load replaces both."""
    from belief_tasks.planning.projection import HARNESS_DEFAULTS, model_load
    from belief_tasks.planning.setting import Setting

    folder = tmp_path / "model"
    folder.mkdir()
    with open(folder / "model.safetensors", "wb") as f:
        f.truncate(500_000_000)  # 0.5 GB of weights (a sparse file: only its size is read)
    h = dict(HARNESS_DEFAULTS)
    weights = h["model_load_s_per_gb"] * 0.5
    assert model_load(Setting("hf", {"pretrained": str(folder)}), None, h, None) == pytest.approx(weights)
    for backend in ("vllm", "vllm-shared"):
        got = model_load(Setting(backend, {"pretrained": str(folder)}), None, h, None)
        assert got == pytest.approx(weights + h["vllm_engine_start_s"])
    # a server's model is loaded already (vllm-serve-shared starts no engine): nothing to load here
    assert model_load(Setting("vllm-serve-shared", {"model": "smol"}), None, h, None) is None
    measured = rates.ModelRates("m", "run", "today", model_load_s=41.0)
    assert model_load(Setting("vllm", {"pretrained": str(folder)}), measured, h, None) == 41.0


def test_a_short_harness_phase_rescales_no_per_request_rate(tmp_path):
    """Writing a run's results pays a fixed 0.55 s (``write_s``): a run of a few requests measures that and the
    clock, so it leaves the per-request rate as it was; a long phase rescales the per-request part alone."""
    from belief_tasks.planning import progress
    from belief_tasks.planning.projection import HARNESS_DEFAULTS, Projection
    from belief_tasks.planning.run_plan import RunPlan, harness_measured
    from belief_tasks.planning.setting import Setting

    h = dict(HARNESS_DEFAULTS)
    setting = Setting("hf-shared", {"pretrained": "m"})
    tiny = RunPlan(setting, Projection(phases={progress.WRITING: h["write_s"] + 3 * h["write_s_per_request"]}), h)
    assert "write_s_per_request" not in harness_measured(tiny, {progress.WRITING: 0.6}, Store(tmp_path / "r.json"))
    n = 100_000  # projected 0.55 + 6 s; measured 12.55 s: 12 s for the requests, twice the projection
    big = RunPlan(setting, Projection(phases={progress.WRITING: h["write_s"] + n * h["write_s_per_request"]}), h)
    got = harness_measured(big, {progress.WRITING: 12.55}, Store(tmp_path / "r.json"))
    assert got["write_s_per_request"] == pytest.approx(2 * h["write_s_per_request"])
    assert "write_s" not in got  # the fixed part stays the default
