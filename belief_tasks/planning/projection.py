"""Seconds per phase, projected from a command's counted requests (``planning.cost``) and rates (``planning.rates``).

The model's phases (one per lm-eval request type) are its units (the tokens the backend computes, plus the tokens
it may generate: ``rates.units``) times the rate stored for the model, setting, family and request type, scaled by
how loaded the device is now against then (``rates.contention``); without a rate, the FLOP projection
(``planning.flops``), labelled as such. The harness's phases (startup, loading the model, recording and
aggregating, writing, the report) come from this machine's harness rates (defaults measured on the project's
2-core CPU where it has none: ``HARNESS_DEFAULTS``). ``project`` is the one projection: ``--estimate`` shows all
of it, a run the phases still to run once its requests are counted (``planning.run_plan``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from belief_tasks.backend_registry import backend
from belief_tasks.planning import progress, rates
from belief_tasks.planning.cost import TaskCost
from belief_tasks.planning.flops import Flop, weights_bytes
from belief_tasks.planning.setting import Setting, machine

#: lm-eval request type of each counted kind
REQUEST_TYPE = {"generate_until (greedy)": "generate_until", "generate_until (sampled)": "generate_until"}
#: the harness's rates where this machine has none stored: measured on the project's 2-core CPU box (under load
#: from other jobs) with the bundled model; seconds, or seconds per unit
HARNESS_DEFAULTS = {
    "startup_s": 12.0,  # python, lm-eval, torch and our hooks, before the tasks are built
    "model_load_s_per_gb": 4.0,  # weights read and placed
    # vLLM's offline engine on top of its weights: its engine process (vLLM imported again), the model runner and the
    # KV cache (the bundled model, the CPU settings of docs/backends_support.md: "loading the model" took 36-39 s
    # on vllm and vllm-shared, 2 s of it the weights)
    "vllm_engine_start_s": 35.0,
    "record_s_per_request": 2e-5,  # process_results, per request
    "aggregate_s_per_doc": 2e-3,  # metrics and standard errors, per document
    "aggregate_s_per_doc_budget": 2e-2,  # with a budget's bootstrap intervals
    "write_s": 0.55,  # the results JSON and samples files: what any run pays (0.58-0.61 s for 3 to 3,877 requests)
    "write_s_per_request": 6e-5,  # and per request
    "report_s": 8.0,  # belief-report: figures, tables, card
    "report_s_per_request": 6e-5,
}


@dataclass
class Projection:
    """Seconds per task and request type, per phase, and where each rate came from."""

    by_task: dict[str, dict[str, float]] = field(default_factory=dict)  # task -> request type -> seconds
    phases: dict[str, float] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    units: dict[str, dict[str, int]] = field(default_factory=dict)  # request type -> family -> units

    @property
    def total(self) -> float:
        return sum(self.phases.values())


def request_types(cost: TaskCost) -> dict[str, dict[str, int]]:
    """A task's kinds grouped by lm-eval request type: request type -> summed ``KindCost`` fields."""
    out: dict[str, dict[str, int]] = {}
    for kind, k in cost.kinds.items():
        rt = REQUEST_TYPE.get(kind, kind)
        acc = out.setdefault(rt, {"requests": 0, "tokens": 0, "shared_tokens": 0, "generated": 0})
        for name in acc:
            acc[name] += getattr(k, name)
    return out


def project_scoring(
    costs: Sequence[TaskCost],
    setting: Setting,
    model: rates.ModelRates | None,
    flop: Flop | None,
    proj: Projection,
    now: float | None = None,
) -> None:
    """The scoring phases: per task and request type, its units times the rate of its family (``rates``), scaled
    by the device's matmul rate when the rate was measured against ``now`` (a shared machine's load), else the FLOP
    projection; what is unknown stays out (and is said)."""
    used, missing = set(), set()
    scale = rates.contention(model.matmul, now) if model is not None else 1.0
    for cost in costs:
        for rt, counts in request_types(cost).items():
            units = rates.units(counts, rt, setting.backend)
            proj.units.setdefault(rt, {}).setdefault(cost.family, 0)
            proj.units[rt][cost.family] += units
            rate, how = model.rate(cost.family, rt) if model is not None else (None, "")
            if rate is not None:
                seconds = rate * units * scale
                used.add(f"{model.label if model is not None else ''}: {how}")
            elif flop is not None:
                seconds = flop.seconds(units, rt, cost.family)
                used.add(flop.label())
            else:
                missing.add(rt)
                continue
            proj.by_task.setdefault(cost.task, {})[rt] = seconds
            phase = progress.scoring_phase(rt)
            proj.phases[phase] = proj.phases.get(phase, 0.0) + seconds
    proj.sources += sorted(used)
    if abs(scale - 1) > 0.05:
        proj.sources.append(loaded(scale, model.matmul if model is not None else None, now))
    if missing:
        proj.sources.append(
            f"no rate and no FLOP projection for {', '.join(sorted(missing))}: left out of the total "
            "(run --calibrate with the model, or once without --estimate)"
        )


def loaded(scale: float, then: float | None, now: float | None) -> str:
    return (
        f"scaled by {scale:.2f}: this device's matmul rate now ({(now or 0) / 1e9:,.0f} GFLOP/s) against when the "
        f"rates were measured ({(then or 0) / 1e9:,.0f} GFLOP/s), another load on a shared machine"
    )


def harness_rates(store: rates.Store, now: float | None = None) -> tuple[dict[str, float], str]:
    """This machine's harness rates (defaults where it has none), scaled like the model's (``loaded``)."""
    own = store.harness.get(machine())
    if own:
        scale = rates.contention(own.get("matmul"), now)
        values = {
            **HARNESS_DEFAULTS,
            **{
                k: v * (scale if k.endswith(("_s", "_request", "_doc", "_budget", "_gb")) else 1)
                for k, v in own.items()
                if k != "matmul"
            },
        }
        return values, "harness rates measured on this machine by earlier runs" + (
            f" (scaled by {scale:.2f})" if abs(scale - 1) > 0.05 else ""
        )
    return dict(HARNESS_DEFAULTS), "harness rates: defaults measured on the project's 2-core CPU (no run here yet)"


def project_harness(
    costs: Sequence[TaskCost],
    h: Mapping[str, float],
    *,
    log_samples: bool,
    report: bool,
    budgeted: Mapping[str, bool],
    proj: Projection,
) -> None:
    """Recording and aggregating, writing and the report, from the harness rates."""
    requests = sum(c.requests for c in costs)
    docs_plain = sum(c.docs for c in costs if not budgeted.get(c.task))
    docs_budget = sum(c.docs for c in costs if budgeted.get(c.task))
    proj.phases[progress.RECORDING] = (
        h["record_s_per_request"] * requests
        + h["aggregate_s_per_doc"] * docs_plain
        + h["aggregate_s_per_doc_budget"] * docs_budget
    )
    proj.phases[progress.WRITING] = h["write_s"] + h["write_s_per_request"] * requests * (1 if log_samples else 0.05)
    if report:
        proj.phases[progress.REPORT] = h["report_s"] + h["report_s_per_request"] * requests


def model_load(
    setting: Setting, model: rates.ModelRates | None, h: Mapping[str, float], now: float | None
) -> float | None:
    """Seconds to load the model: as an earlier run or calibration of this setting measured it (scaled by the load),
    else its weights' size at this machine's rate, and a vLLM engine's start where the backend starts one; None where
    neither is known (an API model)."""
    if model is not None and model.model_load_s:
        return model.model_load_s * rates.contention(model.matmul, now)
    size = weights_bytes(setting.model_args)
    load = h["model_load_s_per_gb"] * size / 1e9 if size else None
    if backend(setting.backend).needs_vllm:
        load = (load or 0.0) + h["vllm_engine_start_s"]
    return load


def project(
    costs: Sequence[TaskCost],
    setting: Setting,
    store: rates.Store,
    *,
    flop: Flop | None,
    now: float | None,
    budgeted: Mapping[str, bool],
    log_samples: bool,
    report: bool,
    before: Mapping[str, float] | None = None,
) -> tuple[Projection, dict[str, float]]:
    """The projection of a command's phases from its counted requests (``costs``): ``before`` holds what was
    measured of the phases before the model's (``--estimate``: building tasks and requests), and with it the
    projection covers the whole command, startup and model loading included (else only what follows the
    building of requests: a run's). ``flop`` serves a request type without a measured rate. Also returns the
    harness rates used (a run rescales them by what it measured)."""
    model = store.models.get(setting.key())
    h, h_source = harness_rates(store, now)
    proj = Projection()
    if before is not None:
        proj.phases[progress.STARTUP] = h["startup_s"]
        proj.phases.update(before)
        load = model_load(setting, model, h, now)
        if load is not None:
            proj.phases[progress.LOADING_MODEL] = load
        order = [p for p in progress.PHASES if p in proj.phases]  # scoring and the harness's phases follow
        proj.phases = {p: proj.phases[p] for p in order}
    project_scoring(costs, setting, model, flop, proj, now)
    project_harness(costs, h, log_samples=log_samples, report=report, budgeted=budgeted, proj=proj)
    proj.sources.append(h_source)
    return proj, h
