"""A long run's phases, each with its estimate, the run's ETA, and a line when a phase overruns its estimate.

``belief-eval`` opens one ``Progress`` per command (``start``). The phases, in order (``PHASES``):

* startup (Python, lm-eval, torch), building tasks (data, documents, the budget's draw: before the model loads),
  loading the model,
* building requests (lm-eval's ``build_all_requests``; our checks of a task's requests, truncation and a server
  probe, run once its ``instances`` are set, so the last task's count towards the first scoring phase:
  ``evaluate_watch``),
* scoring log-likelihoods / generating answers and samples (one phase per lm-eval request type),
* recording and aggregating results (each document's record; metrics, standard errors, a budget's intervals),
* writing results (the results JSON and the samples files), the report (the main job and the profile).

Who says a phase begins: the command (``phase``: startup, the report), lm-eval's hooks (building tasks, loading
the model, and ``evaluate_begins``: the requests are built next, and once it returns the results are written), and
in between a poll of the requests' state (``Progress.add_poll``; ``planning.evaluate_watch``), so neither a task nor
the model reports anything. A phase line says how long the phase is estimated to take (``plan``: seconds per
phase, from the run's counted requests and the stored or calibrated rates, ``planning.run_plan``), the run's
estimated total and its ETA; the end of a phase says how long it took against its estimate. The watchdog thread
runs the polls and prints one line when a phase has run ``OVERRUN`` times its estimate (and again whenever it has
run twice as long since), so a user learns early that the ETA is wrong. What each phase took is kept
(``measured``) for the rate store.

Pure Python: no lm-eval, no torch.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

STARTUP = "startup"
BUILDING_TASKS = "building tasks"
LOADING_MODEL = "loading the model"
BUILDING_REQUESTS = "building requests"
#: each document's record (``process_results``), then the metrics and their standard errors: one phase, since
#: nothing outside lm-eval's ``evaluate`` sees where the one ends and the other begins
RECORDING = "recording and aggregating results"
WRITING = "writing results"
REPORT = "the report"
#: scoring phases, one per lm-eval request type (``scoring_phase``)
SCORING = {
    "loglikelihood": "scoring log-likelihoods",
    "per_token_loglikelihood": "scoring per-token log-likelihoods",
    "generate_until": "generating answers and samples",
    "loglikelihood_rolling": "scoring rolling log-likelihoods",
}
#: the phases in the order a run goes through them
PHASES = (STARTUP, BUILDING_TASKS, LOADING_MODEL, BUILDING_REQUESTS, *SCORING.values(), RECORDING, WRITING, REPORT)
#: a phase that has run this many times its estimate gets a line (then again each time it has run twice as long)
OVERRUN = 2.0
#: ... but never before it has run this long (seconds): short phases vary a lot
OVERRUN_FLOOR = 30.0
#: seconds between two runs of the watchdog's polls (``Progress.watch``), and between two overrun checks
TICK = 0.25
OVERRUN_EVERY = 5.0


def scoring_phase(request_type: str) -> str:
    """The phase of an lm-eval request type."""
    return SCORING.get(request_type, f"scoring {request_type}")


def duration(seconds: float) -> str:
    """``"1 h 02 min"``, ``"4 min 10 s"``, ``"12 s"``."""
    s = int(round(max(0.0, seconds)))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"


def clock(at: float) -> str:
    return time.strftime("%H:%M", time.localtime(at))


@dataclass
class Progress:
    """One command's phases (see the module doc). ``plan``: phase -> estimated seconds (filled as it becomes
    known: the scoring phases once the requests are counted); ``notes``: phase -> what the phase does (its
    requests, tokens); ``out``: where lines go (stderr)."""

    plan: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    out: TextIO | None = None
    prefix: str = "belief-eval progress"
    now: Callable[[], float] = time.monotonic
    watch: bool = True
    measured: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of this process per phase (its threads; not an engine's own process), beside ``measured``'s
    #: wall seconds: what a phase cost whatever else the machine ran
    cpu: dict[str, float] = field(default_factory=dict)
    started: float = 0.0
    current: str | None = None
    _since: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timer: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _warned: dict[str, float] = field(default_factory=dict)
    _wall0: float = 0.0
    _polls: list[Callable[[], None]] = field(default_factory=list)
    _unannounced: str | None = None  # the current phase, begun without its line (``phase(announce=False)``)
    _cpu_since: float = 0.0

    def __post_init__(self):
        self.started = self.started or self.now()
        self._wall0 = time.time() - (self.now() - self.started)

    # --- lines ---------------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        """One line; on the terminal's standard error through tqdm, which moves an active progress bar (lm-eval's
        request bars) below it instead of writing into it."""
        line = f"{self.prefix}: {text}"
        if self.out is None:
            try:
                from tqdm import tqdm

                # the newline in the same write: the watchdog thread says lines too, and another thread's
                # paragraph (a refusal) must not land between a line and its newline
                tqdm.write(line + "\n", file=sys.stderr, end="")
                sys.stderr.flush()
                return
            except ImportError:
                pass
        out = self.out or sys.stderr
        out.write(line + "\n")
        out.flush()

    def elapsed(self) -> float:
        return self.now() - self.started

    def total(self) -> float | None:
        """The run's estimated total: what has run so far, plus the estimates of what is still to run (a current
        phase past its estimate counts as it stands); None before any estimate is known."""
        if not self.plan:
            return None
        ran = self.now() - self._since if self.current is not None else 0.0
        left = sum(self.plan[p] for p in self.plan if p not in self.measured and p != self.current)
        current = max(self.plan.get(self.current, ran), ran) if self.current is not None else 0.0
        return self.elapsed() - ran + current + left

    def eta_text(self) -> str:
        total = self.total()
        if total is None or not self.plan:
            return ""
        left = max(0.0, total - self.elapsed())
        return (
            f"run {duration(self.elapsed())} so far of an estimated {duration(total)}, ETA {clock(time.time() + left)}"
        )

    # --- phases ----------------------------------------------------------------------------------------

    def phase(self, name: str, note: str = "", announce: bool = True) -> None:
        """``name`` begins (the phase before it ends); a phase already current or done is not begun again.
        One line: the phase, what it does, its estimate, how the phase before went, the run's total and ETA;
        ``announce=False`` holds that line back until ``announce`` (its estimate is still being worked out)."""
        with self._lock:
            if name == self.current or name in self.measured:
                return
            ended = self._end_current()
            self.current, self._since, self._cpu_since = name, self.now(), time.process_time()
            if note:
                self.notes[name] = note
            self._unannounced = None if announce else name
        if name != STARTUP and announce:
            self.say(self._begin_line(name, ended))
        elif ended:
            self.say(ended)
        self._ensure_watchdog()

    def announce(self) -> None:
        """The line of the current phase, if it began without one (``phase(announce=False)``)."""
        with self._lock:
            name, self._unannounced = self._unannounced, None
        if name is not None and name == self.current:
            self.say(self._begin_line(name, ""))

    def _begin_line(self, name: str, ended: str) -> str:
        est = self.plan.get(name)
        what = f" ({self.notes[name]})" if self.notes.get(name) else ""
        head = f"{name}{what}" + (f": estimated {duration(est)}" if est is not None else "")
        eta = self.eta_text()
        return "; ".join(part for part in (head, ended, eta) if part)

    def _end_current(self) -> str:
        """End the current phase; "<phase> took X (estimated Y)" ("" when none was current)."""
        if self.current is None:
            return ""
        name, took = self.current, self.now() - self._since
        self.measured[name] = took
        self.cpu[name] = time.process_time() - self._cpu_since
        self.current = None
        est = self.plan.get(name)
        return f"{name} took {duration(took)}" + (f" (estimated {duration(est)})" if est is not None else "")

    def set_plan(self, plan: dict[str, float], notes: dict[str, str] | None = None, summary: str = "") -> None:
        """Estimates of phases still to run (seconds); ``summary``: one line on where they come from."""
        with self._lock:
            self.plan.update(plan)
            self.notes.update(notes or {})
        total = self.total()
        if summary:
            left = max(0.0, total - self.elapsed()) if total is not None else 0.0
            self.say(
                summary
                + (f"; estimated total {duration(total)}, ETA {clock(time.time() + left)}" if total is not None else "")
            )

    def finish(self) -> dict[str, float]:
        """End the last phase; what each phase took."""
        with self._lock:
            ended = self._end_current()
        self._stop.set()
        if ended:
            total = self.elapsed()
            planned = sum(self.plan.get(p, 0.0) for p in self.measured if p in self.plan)
            measured = sum(self.measured[p] for p in self.measured if p in self.plan)
            versus = (
                f"; the estimated phases took {duration(measured)} against {duration(planned)} estimated"
                if self.plan
                else ""
            )
            self.say(f"{ended}; finished in {duration(total)}{versus}")
        return dict(self.measured)

    # --- overruns --------------------------------------------------------------------------------------

    def check_overrun(self) -> str | None:
        """The line for a current phase that has run ``OVERRUN`` times its estimate (None otherwise); it gets a
        line again once it has run twice as long as at its last line."""
        with self._lock:
            name, est = self.current, self.plan.get(self.current or "")
            if name is None or not est:
                return None
            ran = self.now() - self._since
            factor = ran / est
            threshold = self._warned.get(name, OVERRUN)
            if factor < threshold or ran < OVERRUN_FLOOR:
                return None
            self._warned[name] = factor * OVERRUN  # the next line when it has doubled again
        return (
            f"{name} has run {duration(ran)}, {factor:.1f}x its estimate of {duration(est)}: the rates behind "
            f"the estimate do not hold for this phase (another load on the machine, or no measured rate), so the "
            f"ETA is later than shown"
        )

    def add_poll(self, poll: Callable[[], None]) -> None:
        """Run ``poll()`` on the watchdog thread every ``TICK`` seconds until the run ends (it may begin phases)."""
        with self._lock:
            self._polls.append(poll)
        self._ensure_watchdog()

    def remove_poll(self, poll: Callable[[], None]) -> None:
        with self._lock:
            if poll in self._polls:
                self._polls.remove(poll)

    def _ensure_watchdog(self) -> None:
        if not self.watch or self._timer is not None:
            return

        def loop():
            checked = self.now()
            while not self._stop.wait(TICK):
                with self._lock:
                    polls = list(self._polls)
                for poll in polls:
                    try:
                        poll()
                    except Exception as e:  # noqa: BLE001  a poll that fails loses its phases, never the run
                        self.remove_poll(poll)
                        self.say(
                            f"no more phases from {getattr(poll, '__qualname__', 'a poll')}: {type(e).__name__}: {e}"
                        )
                if self.now() - checked >= OVERRUN_EVERY:
                    checked = self.now()
                    line = self.check_overrun()
                    if line:
                        self.say(line)

        self._timer = threading.Thread(target=loop, name="belief-progress", daemon=True)
        self._timer.start()


#: the open run of this process (``start``), or None
_current: Progress | None = None
#: what the open run does when lm-eval's ``evaluate`` begins (``watch``: the command's own, ``belief-eval``)
_on_evaluate: Callable | None = None


def process_age() -> float:
    """Seconds since this process started (Linux: ``/proc``; 0 elsewhere), so that the startup phase holds the
    interpreter's and the imports' time."""
    try:
        import os

        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


def start(progress: Progress | None = None, on_evaluate: Callable | None = None) -> Progress:
    """Open the run of this command (``belief-eval``); ``on_evaluate(lm, task_dict)`` is called when lm-eval's
    ``evaluate`` begins (where the run's requests get built and scored: the command plans and watches them). The
    startup phase began with the process."""
    global _current, _on_evaluate
    _current, _on_evaluate = progress or Progress(started=time.monotonic() - process_age()), on_evaluate
    _current.phase(STARTUP)
    _current._since, _current._cpu_since = _current.started, 0.0
    return _current


def current() -> Progress | None:
    return _current


def phase(name: str, note: str = "") -> None:
    """Report that ``name`` begins, to the open run (nothing when none is open)."""
    if _current is not None:
        _current.phase(name, note)


def evaluate_begins(lm, task_dict) -> Callable[[], None]:
    """lm-eval's ``evaluate`` begins (``harness``'s wrapper says so): the requests are built next. Returns what to
    call when it ends (the results are written next)."""
    if _current is None:
        return lambda: None
    _current.phase(BUILDING_REQUESTS)
    undo = _on_evaluate(lm, task_dict) if _on_evaluate is not None else None

    def ends() -> None:
        if undo is not None:
            undo()
        phase(WRITING)

    return ends


def stop() -> dict[str, float]:
    """Close the open run; what each phase took ({} when none was open)."""
    global _current, _on_evaluate
    run, _current, _on_evaluate = _current, None, None
    return run.finish() if run is not None else {}


def stop_quietly() -> None:
    """Close the open run without its closing line (a command that failed says why itself)."""
    global _current, _on_evaluate
    run, _current, _on_evaluate = _current, None, None
    if run is not None:
        run._stop.set()
