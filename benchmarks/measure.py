"""How the benchmarks measure, in one place: clocks in this process, a child process's wall, CPU and peak memory,
a process tree's peak memory, the machine and its load, rounds in rotating order, and how two arms' outputs compare.

On a shared machine wall time is noisy: every benchmark prints CPU seconds beside it and the 1-minute load average,
and the side-by-side benchmarks alternate their arms (``rotations``) so that a change of load hits every arm alike.
Peak memory is read from the kernel (``wait4``'s ``ru_maxrss`` for a child that ran to its end) or sampled
(``PeakMemory``, for a process tree while it runs). This module imports only the standard library at its top.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.workloads import ROOT

#: what every child run gets: no hub, no datasets download, no tokenizers thread pool (children fork)
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def clocked(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, float, float]:
    """``fn(*args, **kwargs)``: its result, wall seconds and this process's CPU seconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def machine() -> str:
    """The machine in one phrase: architecture, cores, load."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average {load():.1f}"


def child_env(threads: int | None = None, base: dict | None = None) -> dict[str, str]:
    """The environment of a child run: ``base`` (default: this process's), offline, ``threads`` torch threads."""
    env = {**(os.environ if base is None else base), **OFFLINE}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_child(cmd: Sequence[str], env: dict, log: Path, cwd: Path | str = ROOT) -> dict:
    """Run ``cmd`` to its end, its output in ``log``: wall and CPU seconds (user + system of the child and its
    children), peak resident memory in MiB (the kernel's ``ru_maxrss`` of the child), exit status, load after."""
    t0 = time.perf_counter()
    with Path(log).open("w") as fh:
        proc = subprocess.Popen(list(cmd), cwd=str(cwd), env=env, stdout=fh, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    return {
        "wall_s": time.perf_counter() - t0,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "status": os.waitstatus_to_exitcode(status),
        "load": load(),
    }


def belief_eval(*args: str, python: str | None = None) -> list[str]:
    """The command line of ``belief-eval ARGS`` run by ``python`` (default: this interpreter)."""
    return [python or sys.executable, "-m", "belief_tasks.commands.belief_eval", *args]


class PeakMemory:
    """Largest resident set of this process and all its children, sampled in a thread."""

    def __init__(self, every: float = 0.1):
        import psutil

        self.me, self.every, self.peak, self._stop = psutil.Process(), every, 0, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def now(self) -> int:
        import psutil

        total = 0
        for p in [self.me, *self.me.children(recursive=True)]:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            time.sleep(self.every)

    def reset(self) -> None:
        self.peak = self.now()

    def cpu(self) -> float:
        """CPU seconds (user + system) used so far by this process and its live children."""
        import psutil

        total = 0.0
        for p in [self.me, *self.me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total


def rotations(items: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """``(round, item)`` for ``rounds`` rounds of ``items``, each round starting one item later (rotating order:
    a load change between rounds hits every item alike)."""
    for r in range(rounds):
        for item in [*items[r % len(items) :], *items[: r % len(items)]]:
            yield r, item


# ------------------------------------------------------------------ comparing two arms' outputs


def loglikelihood(output) -> float:
    """The log-likelihood of a ``loglikelihood`` output ``(log-likelihood, is_greedy)``, or of a bare number."""
    return output[0] if isinstance(output, (tuple, list)) else output


def loglikelihoods(outputs: Sequence) -> list[float]:
    return [loglikelihood(o) for o in outputs]


def predictions(outputs: Sequence, groups: Sequence[int]) -> list[int]:
    """Per group of consecutive log-likelihood outputs (an instance's options): the index of the likeliest (the
    first of equals)."""
    out, at = [], 0
    for n in groups:
        lls = loglikelihoods(outputs[at : at + n])
        out.append(lls.index(max(lls)))
        at += n
    return out


def gaps(a: Sequence, b: Sequence) -> list[float]:
    """``|a - b|`` of each pair of log-likelihood outputs (two arms', request by request)."""
    return [abs(loglikelihood(x) - loglikelihood(y)) for x, y in zip(a, b, strict=True)]
