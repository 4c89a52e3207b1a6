"""What a backend asks of the device, counted on the CPU from outside (``python -m benchmarks engines --count``).

On a fast accelerator a small model's throughput is set less by arithmetic than by what the host does around it:
forward passes (each reads every weight and launches every kernel), reads of device results to the host (each
waits for the device to finish: a synchronisation) and Python time between forwards (the device idles). A CPU
hides all three, so they are counted here by instrumenting torch in the benchmark process, with no change to
the backend's code:

* **forwards**: calls of the model's top-level ``forward`` (a forward hook); for each, its wall time, so the
  time spent outside forwards (Python, tokenisation, host reads) is the call's wall time minus theirs;
* **host reads**: ``item``, ``tolist``, ``cpu``, ``numpy`` and the conversions ``float()``, ``int()``,
  ``bool()``, ``__index__``, ``__format__`` of a tensor that would live on the accelerator. A CPU run has no
  device, so device residence is tracked (``DeviceTracker``, a ``TorchFunctionMode``): the model's parameters
  and buffers, tensors created with an explicit ``device`` (``torch.tensor(..., device=d)``, ``.to(d)``) and
  every result of an operation with such an input. A tensor built from host data without a device (a list of
  floats already read) is host memory on any machine, and reading it costs nothing;
* **operations per forward**: aten operators that run a kernel (views excluded) inside each forward, counted by
  a ``TorchDispatchMode``: a proxy for kernel launches, which bound a small model's forward on a GPU.

The tracking slows torch down, so forwards and times are taken in a plain pass, host reads and operations in a
second pass of the same requests (both passes must make the same number of forwards).
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.cpu,
    torch.Tensor.numpy,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.__index__,
    torch.Tensor.__format__,
}
FLAG = "_bench_on_device"
TORCH_DIR = str(Path(torch.__file__).parent)


def on_device(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, FLAG, False)


def _names_device(func, args, kwargs) -> bool:
    """A factory or ``.to`` that names a device (where a GPU run would put the tensor on the accelerator)."""
    if kwargs.get("device") is not None:
        return True
    if func is torch.Tensor.to:
        return any(isinstance(a, (str, torch.device)) for a in args[1:])
    return False


def _call_site() -> str:
    """The innermost frame outside torch: file and line of the read."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith(TORCH_DIR) or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
    if frame is None:
        return "?"
    path = frame.f_code.co_filename
    for marker in ("site-packages/", "wt-", "/belief_tasks/", "/benchmarks/"):
        if marker in path:
            path = path.split(marker, 1)[1] if marker.endswith("/") else path
    return f"{path}:{frame.f_lineno} ({frame.f_code.co_name})"


class DeviceTracker(TorchFunctionMode):
    """Marks tensors that would live on the accelerator and counts their reads to the host (by call site)."""

    def __init__(self, model):
        super().__init__()
        for t in [*model.parameters(), *model.buffers()]:
            setattr(t, FLAG, True)
        self.reads: collections.Counter[str] = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in READS:
            if on_device(args[0]):
                self.reads[_call_site()] += 1
            return out
        inputs, _ = tree_flatten((args, kwargs))
        if any(on_device(t) for t in inputs) or _names_device(func, args, kwargs):
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    try:
                        setattr(t, FLAG, True)
                    except (AttributeError, RuntimeError):  # e.g. a parameter view that refuses attributes
                        pass
        return out


class KernelOps(TorchDispatchMode):
    """aten operators that run a kernel (not views), while ``active``."""

    def __init__(self):
        super().__init__()
        self.active, self.ops = False, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.active and not func.is_view:
            self.ops += 1
        return func(*args, **(kwargs or {}))


class Forwards:
    """Top-level forward calls of ``model``: their number and wall time (hooks, removed by ``close``)."""

    def __init__(self, model, kernels: KernelOps | None = None):
        self.calls, self.seconds, self._start, self.kernels = 0, 0.0, 0.0, kernels
        self._handles = [
            model.register_forward_pre_hook(self._pre),
            model.register_forward_hook(self._post, always_call=True),
        ]

    def _pre(self, *_):
        self.calls += 1
        if self.kernels is not None:
            self.kernels.active = True
        self._start = time.perf_counter()

    def _post(self, *_):
        self.seconds += time.perf_counter() - self._start
        if self.kernels is not None:
            self.kernels.active = False

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def timed_pass(model, run) -> dict:
    """``run()`` with forwards counted and timed: its outputs, forwards, wall and forward seconds."""
    fw = Forwards(model)
    wall = time.perf_counter()
    try:
        out = run()
    finally:
        fw.close()
    wall = time.perf_counter() - wall
    return {"outputs": out, "forwards": fw.calls, "wall_s": wall, "forward_s": fw.seconds}


def counted_pass(model, run) -> dict:
    """``run()`` under the device tracker: its outputs, forwards, host reads (total and by call site) and kernel
    operations inside forwards."""
    kernels = KernelOps()
    fw = Forwards(model, kernels)
    tracker = DeviceTracker(model)
    try:
        with tracker, kernels:
            out = run()
    finally:
        fw.close()
    return {
        "outputs": out,
        "forwards": fw.calls,
        "host_reads": sum(tracker.reads.values()),
        "read_sites": dict(tracker.reads.most_common()),
        "kernel_ops": kernels.ops,
    }


#: request types whose requests are scored (their unit: a request); generation's unit is a generated token
SCORED = ("loglikelihood", "per_token_loglikelihood", "loglikelihood_rolling")


def count_workload(lm, by_type: dict[str, list], timed: dict[str, dict]) -> dict[str, dict]:
    """Per request type of a workload: its timed pass (``timed[kind]``, from the benchmark's own run) and a counted
    pass of the same requests. Units: scored requests, or the tokens of the generated texts (the model's tokenizer)."""
    out = {}
    for kind, instances in by_type.items():
        plain = timed[kind]
        counted = counted_pass(
            lm.model, lambda kind=kind, instances=instances: getattr(lm, kind)(instances, disable_tqdm=True)
        )
        if counted["forwards"] != plain["forwards"]:
            raise SystemExit(f"{kind}: {plain['forwards']} forwards in the timed pass, {counted['forwards']} counted")
        units = len(instances) if kind in SCORED else sum(len(lm.tok_encode(t)) for t in plain["outputs"])
        out[kind] = {
            "requests": len(instances),
            "units": units,
            "forwards": plain["forwards"],
            "wall_s": plain["wall_s"],
            "forward_s": plain["forward_s"],
            "host_reads": counted["host_reads"],
            "kernel_ops": counted["kernel_ops"],
            "read_sites": counted["read_sites"],
        }
    return out


def summary(counts: dict[str, dict]) -> dict:
    """One workload's figures for the table: forwards per request, host reads per scored request and per generated
    token, kernel operations per forward, host milliseconds per forward (outside forwards: Python, tokenising,
    reads), and the seconds outside forwards over the whole workload."""
    requests = sum(c["requests"] for c in counts.values())
    forwards = sum(c["forwards"] for c in counts.values())
    scored = [c for k, c in counts.items() if k in SCORED]
    gen = [c for k, c in counts.items() if k not in SCORED]
    outside = sum(c["wall_s"] - c["forward_s"] for c in counts.values())

    def per(parts, key):
        units = sum(c["units"] for c in parts)
        return round(sum(c[key] for c in parts) / units, 3) if units else None

    return {
        "requests": requests,
        "forwards": forwards,
        "forwards_per_request": round(forwards / requests, 3),
        "reads_per_scored_request": per(scored, "host_reads"),
        "reads_per_generated_token": per(gen, "host_reads"),
        "generated_tokens": sum(c["units"] for c in gen),
        "kernel_ops_per_forward": round(sum(c["kernel_ops"] for c in counts.values()) / max(forwards, 1)),
        "host_ms_per_forward": round(1000 * outside / max(forwards, 1), 2),
        "host_s": round(outside, 3),
        "forward_s": round(sum(c["forward_s"] for c in counts.values()), 3),
    }
