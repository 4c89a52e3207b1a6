"""The FLOP projection: a model's time from its parameter count and the device's matmul rate, without the model.

Where no rate was measured for a model and setting (``planning.rates``), a phase's time is projected from FLOPs:
2 x parameters per token the backend computes, at an assumed share (``FLOP_SHARE``) of the rate of a
1024 x 1024 matmul measured on the device in half a second (``matmul_rate``, which also tells how loaded a shared
machine is now). The parameter count is read from the weight files' headers or the config (``parameters``): the
model is never loaded. Every figure from it is labelled a projection, not a measurement (``Flop.label``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

#: FLOP projection: per backend and batch size (a number: "fixed"; "auto"), the share of the measured matmul rate
#: its work reaches per unit (``rates.units``: the tokens it computes, plus a generation's tokens counted at their
#: ``max_gen_toks`` bound, which answers seldom reach), for log-likelihoods and for generations. A backend not
#: listed gets stock ``hf``'s. Measured on the bundled model on the project's 2-core CPU, one torch thread
#: (docs/profile.md, "Cost and precision, measured")
FLOP_SHARE: dict[str, dict[str, dict[str, float]]] = {
    # hf-shared at batch auto: fitted on three profile runs (1 % loaded, one thread, twice; 5 % quiet, two threads),
    # whose scoring reached 29-60 % of the matmul rate measured at their start and whose generation 67-79 %
    # (docs/benchmarks.md, "The FLOP projection's shares"); was 30 % for both (measured / projected 0.48 at 5 %)
    "hf-shared": {
        "fixed": {"loglikelihood": 0.3, "generate_until": 0.3},
        "auto": {"loglikelihood": 0.45, "generate_until": 0.7},
    },
    "hf": {
        "fixed": {"loglikelihood": 0.3, "generate_until": 0.3},
        "auto": {"loglikelihood": 0.3, "generate_until": 0.3},
    },
    # vLLM's CPU engine, one thread, the settings of docs/backends_support.md: the demo's IC-LKE (701 log-likelihoods)
    # scored 111,673 whole-sequence tokens in 566 s on vllm (65 % of the 82 GFLOP/s matmul rate) and 12,254 shared
    # tokens in 77 s on vllm-shared (53 % of 81 GFLOP/s; many short prefills). Generation shares: not measured
    "vllm": {
        "fixed": {"loglikelihood": 0.65, "generate_until": 0.3},
        "auto": {"loglikelihood": 0.65, "generate_until": 0.3},
    },
    "vllm-shared": {
        "fixed": {"loglikelihood": 0.5, "generate_until": 0.3},
        "auto": {"loglikelihood": 0.5, "generate_until": 0.3},
    },
}
# `vllm serve` on the same CPU, one thread, the flags of docs/backends_support.md, 4 requests in flight
# (docs/benchmarks.md, "The estimate on vLLM's CPU engine"): the demo's IC-LKE scored 12,254 shared tokens in 72 s on
# vllm-serve-shared (53 % of the 87 GFLOP/s matmul rate: vllm-shared's share) and 110,972 whole-sequence tokens in
# 370 s on lm-eval's local-completions (92 %: the server computes every prompt's tokens, in long prefills). A
# projection for a server on another device is this machine's, not the server's: a run's stored rate replaces it
FLOP_SHARE["vllm-serve-shared"] = FLOP_SHARE["vllm-shared"]
FLOP_SHARE["local-completions"] = {
    "fixed": {"loglikelihood": 0.9, "generate_until": 0.3},
    "auto": {"loglikelihood": 0.9, "generate_until": 0.3},
}


def parameters(model_args: Mapping[str, Any]) -> int | None:
    """The model's parameter count from its weight files' headers (safetensors) or its config, without loading
    it; None where neither can be read (an API model, a hub model not in the local cache)."""
    name = model_args.get("pretrained") or model_args.get("model")
    tokenizer = model_args.get("tokenizer")
    if tokenizer and Path(str(tokenizer)).expanduser().is_dir() and not Path(str(name or "")).expanduser().is_dir():
        name = tokenizer  # a served model named by the server (model=NAME) and read from its folder (tokenizer=PATH)
    if not name:
        return None
    folder = Path(str(name)).expanduser()
    if folder.is_dir():
        total = 0
        for path in sorted(folder.glob("*.safetensors")):
            try:
                with path.open("rb") as fh:
                    size = int.from_bytes(fh.read(8), "little")
                    header = json.loads(fh.read(size))
            except (OSError, ValueError):
                continue
            for tensor, info in header.items():
                if tensor != "__metadata__":
                    n = 1
                    for d in info.get("shape", []):
                        n *= int(d)
                    total += n
        if total:
            return total
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(str(name), revision=model_args.get("revision") or "main")
    except Exception:  # noqa: BLE001
        return None
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    d, layers, vocab = (getattr(cfg, a, None) for a in ("hidden_size", "num_hidden_layers", "vocab_size"))
    inter = getattr(cfg, "intermediate_size", None) or (4 * d if d else None)
    if not (d and layers and vocab):
        return None
    return int(layers * (4 * d * d + 3 * d * inter) + vocab * d)


def weights_bytes(model_args: Mapping[str, Any]) -> int | None:
    name = model_args.get("pretrained")
    folder = Path(str(name)).expanduser() if name else None
    if folder is None or not folder.is_dir():
        return None
    return sum(p.stat().st_size for pattern in ("*.safetensors", "*.bin") for p in folder.glob(pattern)) or None


def matmul_rate(device: str | None) -> float | None:
    """FLOP per second of a 1024 x 1024 float32 matmul on ``device`` (about half a second of measuring)."""
    return matmul_rates(device)[0]


def matmul_rates(device: str | None) -> tuple[float | None, float | None]:
    """(FLOP per second, FLOP per CPU-second of this process) of a 1024 x 1024 float32 matmul on ``device``, in
    about half a second; the second is None on a GPU. Their ratio is how much of the CPU this process gets now."""
    try:
        import torch
    except ImportError:
        return None, None
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        # constants, not torch.randn: a run measures this between lm-eval's seeding and its sampling, and must
        # leave the global generator as it found it (an unseeded neighbour task samples from it)
        a = torch.full((1024, 1024), 0.01, device=dev)
        b = torch.full((1024, 1024), 0.02, device=dev)
        a @ b
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - t0 < 0.4:
            a @ b
            n += 1
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        flop = 2 * 1024**3 * n
        return flop / wall, (flop / cpu if cpu > 0 and not dev.startswith("cuda") else None)
    except Exception:  # noqa: BLE001  a device we cannot measure: no projection
        return None, None


def flop_share(backend: str, batch_size: Any) -> dict[str, float]:
    """The shares of the matmul rate ``backend`` reaches at ``batch_size`` (``FLOP_SHARE``)."""
    kind = backend if backend in FLOP_SHARE else "hf"
    shares = FLOP_SHARE[kind]
    return shares["auto" if str(batch_size or "").startswith("auto") else "fixed"]


@dataclass
class Flop:
    """The FLOP projection's inputs: the model's parameters, the device's matmul rate now, and the shares of it the
    backend reaches at its batch size (``flop_share``)."""

    parameters: int
    rate: float  # FLOP/s of a matmul on the device
    backend: str = "hf-shared"
    batch_size: Any = None

    def seconds(self, units: int, request_type: str, family: str = "") -> float:
        """The projected seconds of ``units`` of work of ``request_type`` (``rates.units``) of ``family``'s tasks:
        at the family's share where one was measured, else the request type's."""
        share = flop_share(self.backend, self.batch_size)
        of = share.get(f"{family}|{request_type}") or share.get(request_type) or share["loglikelihood"]
        return 2.0 * self.parameters * units / (self.rate * of)

    def label(self) -> str:
        share = flop_share(self.backend, self.batch_size)
        return (
            f"FLOP projection, not a measurement: 2 x {self.parameters / 1e6:,.1f} M parameters per unit (a token "
            f"computed, or generated at max_gen_toks) at {share['loglikelihood']:.0%} (log-likelihoods) and "
            f"{share['generate_until']:.0%} (generations) of the {self.rate / 1e9:,.0f} GFLOP/s matmul rate measured "
            f"on this device: the shares {self.backend} reached at batch size {self.batch_size or 1} on the "
            "project's 2-core CPU"
        )
