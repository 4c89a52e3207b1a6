"""A ``belief-eval`` run's plan: its phases shown as they come, its requests counted once they are built, every phase
still to run projected, and at its end what each phase took stored as the rates of the next estimate.

``begin_run`` opens the run's progress (``planning.progress``) with the phases the same command took last time (or
its ``--estimate`` projected). When lm-eval's ``evaluate`` begins (``progress.evaluate_begins``), ``on_evaluate``
reads, on the progress's watchdog thread, where ``evaluate`` is from its requests (``planning.evaluate_watch``): no
task and no model method reports anything. Once every task's requests exist, a second thread counts them with the
model's own tokenizer (``planning.cost``) and projects every phase still to run (``planning.projection``): the
first scoring phase's line waits for that plan. ``record_run`` stores the finished run's rates (``rates.Store``).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from belief_tasks.hooks import harness
from belief_tasks.planning import progress, rates
from belief_tasks.planning.cost import Encoder, TaskCost, count_task
from belief_tasks.planning.evaluate_watch import RequestState, tasks_of
from belief_tasks.planning.flops import Flop, matmul_rates, parameters, weights_bytes
from belief_tasks.planning.projection import Projection, project, request_types
from belief_tasks.planning.setting import Setting, machine, setting_from_args


@dataclass
class RunPlan:
    """What a run planned once its requests were counted (kept to store its rates at the end)."""

    setting: Setting
    projection: Projection
    harness: dict[str, float] = field(default_factory=dict)
    matmul: float | None = None  # the device's matmul rate when the run was planned
    matmul_cpu: float | None = None  # the same per CPU-second of this process (a CPU)


_plan: RunPlan | None = None
#: the open run's command (``rates.command_key``), set by ``begin_run``
_command: str | None = None
#: harness rates each harness phase is projected with (scaled by measured / projected after a run)
PHASE_RATES = {
    progress.RECORDING: ("record_s_per_request", "aggregate_s_per_doc", "aggregate_s_per_doc_budget"),
    progress.WRITING: ("write_s_per_request",),
    progress.REPORT: ("report_s", "report_s_per_request"),
}
#: a phase's fixed seconds (kept as they are), where its rates above are per unit only
PHASE_FIXED = {progress.WRITING: "write_s"}
#: a harness phase that took less rescales nothing: what it measured is its fixed cost and the clock's noise, and
#: per request it would say that a whole dataset writes its samples in hours (a test's 3 requests in 0.6 s)
MIN_RESCALE_S = 2.0


def first_process() -> bool:
    """Whether this is the first process of its launch (``accelerate launch`` / torchrun set ``RANK``)."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def begin_run(args: Sequence[str], report: bool) -> progress.Progress:
    """Open a ``belief-eval`` run's progress: the phases this command took last time (or its ``--estimate``
    projected) are its first estimates, replaced by a fresh projection once its requests are counted."""
    global _command, _plan
    _command, _plan = rates.command_key(args), None
    log_samples = any(a in ("--log_samples", "-s") for a in args)
    run = progress.start(on_evaluate=watcher(setting_from_args(args), report, log_samples))
    harness.watch_evaluate(progress.evaluate_begins)  # told by our evaluate hook (nothing once the run is closed)
    if not first_process():
        run.out = open(os.devnull, "w")  # noqa: SIM115  one process of a launch speaks (and stores rates)
    before = rates.Store.load().commands.get(_command)
    if before:
        run.set_plan({k: v for k, v in before.items() if k in progress.PHASES and (report or k != progress.REPORT)})
    return run


class Planner:
    """Counts one ``evaluate`` call's built requests and projects the phases still to run. What it needs of the
    model (its tokenizer, copied; the device's matmul rate now) is taken on the main thread before the requests are
    built; ``plan`` then runs on a thread of its own."""

    def __init__(self, lm: Any, setting: Setting, report: bool, log_samples: bool) -> None:
        from belief_tasks.hooks.lm_eval_api import model_behind_cache

        inner = model_behind_cache(lm)
        tokenizer = getattr(inner, "tokenizer", None)
        self.setting, self.report, self.log_samples = setting, report, log_samples
        self.encoder = None
        if tokenizer is not None and hasattr(tokenizer, "encode"):
            max_length = int(getattr(inner, "max_length", 2048))
            self.encoder = Encoder(tokenizer, max_length, bool(getattr(inner, "add_bos_token", False)))
        self.sharing = setting.loglikelihood_sharing(engine_block_size(inner))
        self.now, self.now_cpu = matmul_rates(setting.device)
        params = parameters(setting.model_args)
        self.flop = Flop(params, self.now, setting.backend, setting.batch_size) if params and self.now else None

    def plan(self, tasks: Sequence[Any], run: progress.Progress) -> None:
        """Count ``tasks``' requests, project, and hand the estimates to ``run`` (a failure loses the ETA only)."""
        global _plan
        try:
            if self.encoder is None:
                run.say("no estimate: this backend has no tokenizer to count its requests with")
                return
            t0 = time.perf_counter()
            sharing, block = self.sharing
            costs = [count_task(t, self.encoder, getattr(t, "FAMILY", ""), sharing, block) for t in tasks]
            counted = time.perf_counter() - t0
            budgeted = {
                c.task: getattr(getattr(t, "options", None), "budget", None) is not None for c, t in zip(costs, tasks)
            }
            proj, harness = project(
                costs,
                self.setting,
                rates.Store.load(),
                flop=self.flop,
                now=self.now,
                budgeted=budgeted,
                log_samples=self.log_samples,
                report=self.report,
            )
            _plan = RunPlan(self.setting, proj, harness, self.now, self.now_cpu)
            summary = f"counted {sum(c.requests for c in costs):,} requests in {counted:.1f} s; rates: "
            run.set_plan(proj.phases, phase_notes(costs, proj), summary + "; ".join(proj.sources))
        except Exception as e:  # noqa: BLE001  a plan that fails loses the ETA, never the run
            run.say(f"no estimate: {type(e).__name__}: {e}")


def engine_block_size(inner: Any) -> int | None:
    """The block size of the vLLM engine or server behind a backend of ours that reads its prefix cache (None
    for any other backend, or a server that does not say: the run's own checks name what is wrong with it)."""
    served = getattr(inner, "_server_cache", None)  # vllm-serve-shared: the server's /metrics
    if callable(served):
        try:
            return int(served()[0])
        except Exception:  # noqa: BLE001  the planner never stops a run
            return None
    engine = getattr(getattr(inner, "model", None), "llm_engine", None)  # vllm-shared: the offline engine
    cache = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    size = getattr(cache, "block_size", None)
    return int(size) if size else None


def phase_notes(costs: Sequence[TaskCost], proj: Projection) -> dict[str, str]:
    """Per scoring phase, what it does: its requests and units."""
    notes = {}
    for rt, by_family in proj.units.items():
        reqs = sum(request_types(c).get(rt, {}).get("requests", 0) for c in costs)
        notes[progress.scoring_phase(rt)] = f"{reqs:,} requests, {sum(by_family.values()):,} units"
    return notes


class Watch:
    """One ``evaluate`` call followed from its requests' state (``RequestState``), polled by the progress's
    watchdog: each phase begins when the state says so, and the plan starts once every request is built."""

    def __init__(self, run: progress.Progress, state: RequestState, planner: Planner | None) -> None:
        self.run, self.state, self.planner = run, state, planner
        self.seen = progress.BUILDING_REQUESTS
        self.thread: threading.Thread | None = None
        self.planned = threading.Event()  # the plan is set (or failed): phases are announced as they begin
        self._lock = threading.Lock()

    def poll(self) -> None:
        with self._lock:  # the watchdog and ``end`` both poll
            name = self.state.phase()
            if name == self.seen:
                return
            self.seen = name
            thread = None
            if self.planner is not None and self.thread is None:
                thread = threading.Thread(target=self._plan, name="belief-plan", daemon=True)
                self.thread = thread
            # a phase begun while the plan is worked out waits for its estimate (``_plan`` announces it)
            self.run.phase(name, announce=self.planner is None or self.planned.is_set())
            if thread is not None:
                thread.start()

    def _plan(self) -> None:
        assert self.planner is not None
        try:
            self.planner.plan(self.state.tasks, self.run)
        finally:
            self.planned.set()
            self.run.announce()

    def end(self) -> None:
        """``evaluate`` returned: the last phase it reached begins if no poll saw it, the plan is waited for (its
        rates are stored at the end of the run), and polling stops."""
        self.poll()
        self.run.remove_poll(self.poll)
        if self.thread is not None:
            self.thread.join()


def watcher(setting: Setting, report: bool, log_samples: bool) -> Callable[[Any, Any], Callable[[], None]]:
    """``progress.start``'s ``on_evaluate`` for a ``belief-eval`` run: follows the ``evaluate`` call's phases
    (``Watch``) and plans the run once its requests are built (``Planner``; the first process of a launch only)."""

    def on_evaluate(lm: Any, task_dict: Any) -> Callable[[], None]:
        run = progress.current()
        if run is None:
            return lambda: None
        planner = None
        if first_process():
            try:
                planner = Planner(lm, setting, report, log_samples)
            except Exception as e:  # noqa: BLE001  a plan that cannot start loses the ETA, never the run
                run.say(f"no estimate: {type(e).__name__}: {e}")
        watch = Watch(run, RequestState(tasks_of(task_dict)), planner)
        run.add_poll(watch.poll)
        return watch.end

    return on_evaluate


def planned() -> dict[str, Any]:
    """What the open run planned (for ``BELIEF_PROGRESS_JSON``): the device's matmul rate then, the units and the
    projected seconds per task and request type ({} before its requests were counted)."""
    if _plan is None:
        return {}
    return {
        "matmul": _plan.matmul,
        "matmul_cpu": _plan.matmul_cpu,
        "units": _plan.projection.units,
        "by_task": _plan.projection.by_task,
    }


def record_run(measured: Mapping[str, float]) -> None:
    """Store a finished run's rates (``rates.Store``): each scoring phase rescales the rates of its model and
    setting by measured / projected (a family never measured gets the phase's pooled rate), each harness phase
    the harness rates it was projected with, and the command's phases are kept for its next run."""
    if not first_process():
        return
    plan, store = _plan, rates.Store.load()
    if _command is not None:
        store.record_command(_command, {k: v for k, v in measured.items() if k in progress.PHASES})
    if plan is not None:
        phases = {
            rt: (measured[progress.scoring_phase(rt)], by_family)
            for rt, by_family in plan.projection.units.items()
            if measured.get(progress.scoring_phase(rt))
        }
        if phases:
            store.record_run(
                plan.setting.key(), plan.setting.label(), phases, measured.get(progress.LOADING_MODEL), plan.matmul
            )
        store.record_harness(machine(), harness_measured(plan, measured, store))
    try:
        store.save()
    except OSError:
        pass  # a read-only cache loses the rates, never the run


def harness_measured(plan: RunPlan, measured: Mapping[str, float], store: rates.Store) -> dict[str, float]:
    """This machine's harness rates after a run: each rate its phase was projected with, scaled by measured /
    projected; the startup and the model's load as measured; the rest rescaled to this run's device speed."""
    harness = {}
    for phase, names in PHASE_RATES.items():
        projected, took = plan.projection.phases.get(phase), measured.get(phase)
        fixed = plan.harness.get(PHASE_FIXED.get(phase, ""), 0.0)
        if projected and took and took >= MIN_RESCALE_S and projected > fixed:
            harness.update({n: plan.harness[n] * max(took - fixed, 0.0) / (projected - fixed) for n in names})
    if measured.get(progress.STARTUP):
        harness["startup_s"] = measured[progress.STARTUP]
    if plan.matmul:  # what this run did not measure is rescaled to this run's device speed
        old = store.harness.get(machine(), {})
        scale = rates.contention(old.get("matmul"), plan.matmul)
        harness = {**{k: v * scale for k, v in old.items() if k != "matmul"}, **harness, "matmul": plan.matmul}
    size = weights_bytes(plan.setting.model_args)
    if measured.get(progress.LOADING_MODEL) and size:
        harness["model_load_s_per_gb"] = measured[progress.LOADING_MODEL] / (size / 1e9)
    return harness
