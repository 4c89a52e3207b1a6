"""Measured rates, kept between runs: how fast a model scores on a backend, and how fast the harness works.

The estimate (``planning.estimate``) projects a command's time from counts (``planning.cost``) and rates.
A rate is seconds per *unit of work*: for a request type, the tokens the backend computes (with prefix sharing
where it shares: ``backend_registry``) plus the tokens it may generate. Rates come from

* a **calibration** (``belief-eval --estimate --calibrate``): a few seconds of the command's own requests, per
  family and request type, on the real model;
* a **run** (every ``belief-eval`` run with progress): what each scoring phase took against its units, which
  rescales the family rates of that request type (``Store.record_run``);

and are stored in ``<cache>/rates.json`` (``paths.cache_dir``), keyed by the model, its backend and what
changes its speed (``key``). The harness's own rates (startup, model loading, building requests, recording,
aggregating, writing, the report) are stored per machine. Pure Python: no lm-eval, no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from belief_tasks.backend_registry import backend as backend_row
from belief_tasks.paths import cache_dir

VERSION = 1


#: how a backend shares a log-likelihood call's prefixes: hf-shared's radix tree, or vLLM's prefix cache in blocks
TREE, BLOCKS = "tree", "blocks"
#: vLLM's block size where nothing names another: vllm-shared's on a CPU (``backends.vllm_shared.CPU_BLOCK_SIZE``,
#: and the CPU server's flags in docs/backends_support.md) and vLLM's own on a GPU
DEFAULT_BLOCK_SIZE = {"cpu": 32, "cuda": 16}


def store_path() -> Path:
    """``$BELIEF_RATES`` or ``<cache>/rates.json``."""
    env = os.environ.get("BELIEF_RATES")
    return Path(env).expanduser() if env else cache_dir() / "rates.json"


def sharing(backend: str) -> tuple[bool, bool]:
    """(log-likelihoods shared, generation prompts shared) on ``backend`` (``backend_registry``)."""
    row = backend_row(backend)
    return row.shares_loglikelihood, row.shares_generation


def units(kind_cost: Mapping[str, int], request_type: str, backend: str) -> int:
    """The work of one request kind on ``backend``: tokens it computes, plus the tokens it may generate. A
    log-likelihood's tokens are counted as ``hf`` forwards them (context + continuation - 1: the last token is
    predicted, never read); a backend that computes the whole sequence (``Backend.whole_sequence``) computes one
    more each."""
    ll, gen = sharing(backend)
    shared = ll if request_type != "generate_until" else gen
    computed = kind_cost["shared_tokens"] if shared else kind_cost["tokens"]
    if not shared and request_type != "generate_until" and backend_row(backend).whole_sequence:
        computed += kind_cost.get("requests", 0)
    return int(computed) + int(kind_cost.get("generated", 0))


def key(parts: Mapping[str, Any]) -> str:
    """A stable key of what makes a rate (a JSON object: model identity, backend, dtype, device, batch size)."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class ModelRates:
    """Rates of one model on one backend and setting (``key``)."""

    label: str
    source: str  # "calibration" | "run"
    when: str
    per_unit: dict[str, float] = field(default_factory=dict)  # "family|request type" -> seconds per unit
    pooled: dict[str, float] = field(default_factory=dict)  # request type -> seconds per unit, all families
    model_load_s: float | None = None
    note: str = ""
    matmul: float | None = None  # FLOP/s of the device's matmul when they were measured (its load then)

    def rate(self, family: str, request_type: str) -> tuple[float | None, str]:
        """(seconds per unit, how it was found) for ``family``'s requests of ``request_type``."""
        own = self.per_unit.get(f"{family}|{request_type}")
        if own is not None:
            return own, f"{self.source} of {self.when}"
        pooled = self.pooled.get(request_type)
        if pooled is not None:
            return pooled, f"{self.source} of {self.when}, other families' {request_type} rate"
        return None, ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "source": self.source,
            "when": self.when,
            "per_unit": self.per_unit,
            "pooled": self.pooled,
            "model_load_s": self.model_load_s,
            "note": self.note,
            "matmul": self.matmul,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelRates":
        return cls(
            d.get("label", ""),
            d.get("source", ""),
            d.get("when", ""),
            dict(d.get("per_unit") or {}),
            dict(d.get("pooled") or {}),
            d.get("model_load_s"),
            d.get("note", ""),
            d.get("matmul"),
        )


@dataclass
class Store:
    """The rate file: model rates by key, harness rates by machine, and per command (``command_key``) the seconds
    its phases took or were estimated to take, so that a run shows estimates from its first phase on."""

    path: Path
    models: dict[str, ModelRates] = field(default_factory=dict)
    harness: dict[str, dict[str, float]] = field(default_factory=dict)
    commands: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None = None) -> "Store":
        path = path or store_path()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls(path)
        if data.get("version") != VERSION:
            return cls(path)
        return cls(
            path,
            {k: ModelRates.from_dict(v) for k, v in (data.get("models") or {}).items()},
            {k: dict(v) for k, v in (data.get("harness") or {}).items()},
            {k: dict(v) for k, v in (data.get("commands") or {}).items()},
        )

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a partial file per process: runs that share the store (a test suite's workers) each replace it whole
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        data = {
            "version": VERSION,
            "models": {k: v.as_dict() for k, v in self.models.items()},
            "harness": self.harness,
            "commands": self.commands,
        }
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(self.path)

    def record_calibration(
        self,
        model_key: str,
        label: str,
        per_unit: Mapping[str, float],
        model_load_s: float | None,
        matmul: float | None = None,
    ) -> ModelRates:
        """A calibration's rates replace the family rates it measured (the others are kept, rescaled to the
        device's matmul rate of this calibration)."""
        old = self.models.get(model_key)
        kept = {k: v * _scale(old.matmul, matmul) for k, v in old.per_unit.items()} if old else {}
        rates = ModelRates(
            label,
            "calibration",
            today(),
            {**kept, **per_unit},
            {},
            model_load_s if model_load_s is not None else (old.model_load_s if old else None),
            matmul=matmul,
        )
        rates.pooled.update(pool(rates.per_unit))
        self.models[model_key] = rates
        return rates

    def record_run(
        self,
        model_key: str,
        label: str,
        phases: Mapping[str, tuple[float, Mapping[str, int]]],
        model_load_s: float | None,
        matmul: float | None = None,
    ) -> ModelRates:
        """A run's scoring phases: request type -> (seconds, {family: units}). Where family rates exist for the
        request type, they are rescaled by measured / projected (the run cannot tell the families of one call
        apart); families without a rate get the phase's pooled rate. ``matmul``: the device's matmul rate during
        the run, which older rates are first rescaled to."""
        old = self.models.get(model_key) or ModelRates(label, "run", today())
        scale = _scale(old.matmul, matmul)
        per_unit = {k: v * scale for k, v in old.per_unit.items()}
        pooled = {k: v * scale for k, v in old.pooled.items()}
        for request_type, (seconds, by_family) in phases.items():
            total = sum(by_family.values())
            if total <= 0 or seconds <= 0:
                continue
            known = {f: u for f, u in by_family.items() if f"{f}|{request_type}" in per_unit}
            projected = sum(per_unit[f"{f}|{request_type}"] * u for f, u in known.items())
            if known and projected > 0:
                if len(known) == len(by_family):
                    scale = seconds / projected
                else:  # some families unknown: share the time by units
                    scale = (seconds * sum(known.values()) / total) / projected
                for f in known:
                    per_unit[f"{f}|{request_type}"] *= scale
            pooled[request_type] = seconds / total
            for f in by_family:
                per_unit.setdefault(f"{f}|{request_type}", pooled[request_type])
        rates = ModelRates(
            label,
            "run",
            today(),
            per_unit,
            pooled,
            model_load_s if model_load_s is not None else old.model_load_s,
            matmul=matmul,
        )
        self.models[model_key] = rates
        return rates

    def record_harness(self, machine: str, values: Mapping[str, float]) -> None:
        self.harness[machine] = {**self.harness.get(machine, {}), **values}

    def record_command(self, command: str, phases: Mapping[str, float]) -> None:
        """The seconds of a command's phases (measured, or estimated by ``--estimate``), newest first."""
        self.commands[command] = {**self.commands.pop(command, {}), **phases}  # moved to the newest
        while len(self.commands) > MAX_COMMANDS:  # the oldest entries go
            self.commands.pop(next(iter(self.commands)))


#: commands whose phases the store keeps
MAX_COMMANDS = 200
#: arguments that change neither what a command computes nor how fast (where results go, what is logged)
COMMAND_IGNORED = (
    "--output_path",
    "-o",
    "--log_samples",
    "-s",
    "--verbosity",
    "-v",
    "--use_cache",
    "-c",
    "--wandb_args",
    "--hf_hub_log_args",
    "--show_config",
)


def command_key(args: Sequence[str]) -> str:
    """A key of a ``belief-eval`` command line for its phases (``Store.commands``): every argument but those in
    ``COMMAND_IGNORED`` (and their values)."""
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in COMMAND_IGNORED:
            skip = "=" not in a and name not in ("--log_samples", "-s", "--show_config")
            continue
        kept.append(a)
    return key({"args": kept})


#: a shared machine's load moves rates by this much at most (the matmul rate's ratio is clamped to it)
MAX_SCALE = 8.0


def _scale(then: float | None, now: float | None) -> float:
    """How much slower work runs now than when a rate was measured: the device's matmul rate then / now (another
    load on a shared machine), clamped to ``MAX_SCALE``; 1 where either is unknown."""
    if not then or not now:
        return 1.0
    return min(MAX_SCALE, max(1 / MAX_SCALE, then / now))


def contention(then: float | None, now: float | None) -> float:
    """``_scale`` for a projection: rates measured at matmul rate ``then``, the device at ``now``."""
    return _scale(then, now)


def pool(per_unit: Mapping[str, float]) -> dict[str, float]:
    """Per request type, the mean of its family rates (a family never measured borrows it)."""
    out: dict[str, list[float]] = {}
    for name, rate in per_unit.items():
        out.setdefault(name.split("|", 1)[1], []).append(rate)
    return {k: sum(v) / len(v) for k, v in out.items()}


def today() -> str:
    return time.strftime("%Y-%m-%d %H:%M")
