"""What a measured rate is kept for: the machine, the backend, the model's arguments, the batch size, the device.

Rates (``planning.rates``) are stored under ``Setting.key``: a run's speed on another machine, backend, dtype,
batch size or context length says little about this one's. Pure Python: torch is asked only for the GPU's name and
the thread count (``machine``).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from belief_tasks.backend_registry import backend as backend_row
from belief_tasks.planning import rates


def machine() -> str:
    """This machine, as rates are kept for it: its GPU, else its CPU model, and its cores and threads."""
    gpu = ""
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
        threads = torch.get_num_threads()
    except Exception:  # noqa: BLE001  no torch: a CPU description is enough
        threads = 0
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{gpu or cpu}, {os.cpu_count()} cores, {threads} threads"


@dataclass(frozen=True)
class Setting:
    """What a run's speed depends on: backend, model arguments, batch size, device."""

    backend: str
    model_args: Mapping[str, Any]
    batch_size: Any = None
    device: str | None = None

    @property
    def model_name(self) -> str:
        name = str(self.model_args.get("pretrained") or self.model_args.get("model") or "?")
        return Path(name).name if os.sep in name else name

    def key(self) -> str:
        from belief_tasks.hooks.answer_cache import identity

        return rates.key(
            {
                "identity": identity(self.backend, dict(self.model_args)),
                "batch_size": str(self.batch_size),
                "device": self.device,
                "max_length": self.model_args.get("max_length"),
                "machine": machine(),
            }
        )

    def loglikelihood_sharing(self, block_size: int | None = None) -> tuple[str | None, int]:
        """How this backend shares a log-likelihood call's prefixes (``rates.TREE``, ``rates.BLOCKS`` or None) and at
        which block size: ``block_size`` (what the engine or server says), else the model argument, else vLLM's
        default on this device (``rates.DEFAULT_BLOCK_SIZE``)."""
        if backend_row(self.backend).shares_in_blocks:
            device = self.device or ("cuda" if _cuda() else "cpu")
            size = (
                block_size
                or self.model_args.get("block_size")
                or rates.DEFAULT_BLOCK_SIZE["cpu" if device == "cpu" else "cuda"]
            )
            return rates.BLOCKS, int(size)
        return (rates.TREE if rates.sharing(self.backend)[0] else None), 0

    def label(self) -> str:
        dtype = self.model_args.get("dtype") or self.model_args.get("torch_dtype") or "default dtype"
        return (
            f"{self.model_name} on {self.backend} ({dtype}, {self.device or 'default device'}, batch size "
            f"{self.batch_size or 1}; {machine()})"
        )


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _values(args: Sequence[str], option: str) -> list[str]:
    out = []
    for i, a in enumerate(args):
        if a == option and i + 1 < len(args):
            out.append(args[i + 1])
        elif a.startswith(option + "="):
            out.append(a.split("=", 1)[1])
    return out


def setting_from_args(args: Sequence[str]) -> Setting:
    """The ``Setting`` of a ``belief-eval`` command line (read as lm-eval reads it: the last ``--model``,
    ``--batch_size`` and ``--device``; ``--model_args`` merged)."""
    from belief_tasks.hooks.answer_cache import parse_model_args

    def last(option: str) -> str | None:
        found = _values(args, option)
        return found[-1] if found else None

    return Setting(
        last("--model") or "hf", parse_model_args(_values(args, "--model_args")), last("--batch_size"), last("--device")
    )
