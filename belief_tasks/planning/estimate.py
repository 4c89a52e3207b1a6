"""A command's cost before the model loads (``belief-eval --estimate``), and the plan a run's progress shows.

``belief-eval --estimate ARGS`` takes the arguments of a run. It builds the tasks and their requests exactly as
the run would (bad input is refused the same way), counts them (``belief_tasks.planning.cost``: per task the facts, the
requests by kind, the tokens to compute with and without prefix sharing), projects the time of every phase,
prints it and exits, before any model is loaded. The time of the model's phases comes from rates
(``belief_tasks.planning.rates``), in this order:

1. rates stored for this model, backend and setting by an earlier run or calibration;
2. ``--calibrate``: the model is loaded and a few seconds of the command's own requests (whole documents of
   every task, per request type) are timed; the rates are stored for the next estimate and run;
3. otherwise a FLOP projection, labelled as such: 2 x parameters per token, at an assumed share of the matmul
   rate measured on this device (``FLOP_SHARE``).

The harness's own phases (startup, building, recording, aggregating, writing, the report) use rates stored by
earlier runs on this machine, or defaults measured on the project's 2-core CPU (``HARNESS_DEFAULTS``). Building
the tasks and their requests is measured as the estimate does it.

A run (``belief-eval`` without ``--estimate``) makes the same projection once its requests are built
(``plan_run``) and shows it phase by phase (``belief_tasks.planning.progress``); at its end the measured phases are
stored as rates (``record_run``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from belief_tasks.planning import progress, rates
from belief_tasks.planning.cost import (
    Encoder,
    TaskCost,
    by_kind_order,
    count_instances,
    count_task,
    shared_facts,
    totals,
)
from belief_tasks.planning.progress import duration

#: lm-eval request type of each counted kind
REQUEST_TYPE = {"generate_until (greedy)": "generate_until", "generate_until (sampled)": "generate_until"}
#: FLOP projection: the share of the measured matmul rate a forward reaches per prompt token, and per generated
#: token counted at its ``max_gen_toks`` bound (answers stop earlier, so a bound token costs less than a real one).
#: Measured on the bundled model on the 2-core CPU (hf-shared, the main job): 0.30 and 0.61
FLOP_SHARE = {"prompt": 0.3, "decode": 0.6}
#: seconds of the command's own requests a calibration times per family and request type (at least one document)
CALIBRATION_SECONDS = 2.0
#: the harness's rates where this machine has none stored: measured on the project's 2-core CPU box (under load
#: from other jobs) with the bundled model; seconds, or seconds per unit
HARNESS_DEFAULTS = {
    "startup_s": 12.0,  # python, lm-eval, torch and our hooks, before the tasks are built
    "model_load_s_per_gb": 4.0,  # weights read and placed
    "record_s_per_request": 2e-5,  # process_results, per request
    "aggregate_s_per_doc": 2e-3,  # metrics and standard errors, per document
    "aggregate_s_per_doc_budget": 2e-2,  # with a budget's bootstrap intervals
    "write_s_per_request": 6e-5,  # the results JSON and samples files
    "report_s": 8.0,  # belief-report: figures, tables, card
    "report_s_per_request": 6e-5,
}


# --- what makes a rate -------------------------------------------------------------------------------


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

    def label(self) -> str:
        dtype = self.model_args.get("dtype") or self.model_args.get("torch_dtype") or "default dtype"
        return (
            f"{self.model_name} on {self.backend} ({dtype}, {self.device or 'default device'}, batch size "
            f"{self.batch_size or 1}; {machine()})"
        )


# --- the FLOP projection -------------------------------------------------------------------------------


def parameters(model_args: Mapping[str, Any]) -> int | None:
    """The model's parameter count from its weight files' headers (safetensors) or its config, without loading
    it; None where neither can be read (an API model, a hub model not in the local cache)."""
    name = model_args.get("pretrained") or model_args.get("model")
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
    try:
        import torch
    except ImportError:
        return None
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        # constants, not torch.randn: a run measures this between lm-eval's seeding and its sampling, and must
        # leave the global generator as it found it (an unseeded neighbour task samples from it)
        a = torch.full((1024, 1024), 0.01, device=dev)
        b = torch.full((1024, 1024), 0.02, device=dev)
        a @ b
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.4:
            a @ b
            n += 1
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        return 2 * 1024**3 * n / (time.perf_counter() - t0)
    except Exception:  # noqa: BLE001  a device we cannot measure: no projection
        return None


@dataclass
class Flop:
    """The FLOP projection's inputs."""

    parameters: int
    rate: float  # FLOP/s of a matmul on the device

    def seconds(self, prompt_tokens: int, generated: int) -> float:
        work = 2.0 * self.parameters
        return work * prompt_tokens / (self.rate * FLOP_SHARE["prompt"]) + work * generated / (
            self.rate * FLOP_SHARE["decode"]
        )

    def label(self) -> str:
        return (
            f"FLOP projection, not a measurement: 2 x {self.parameters / 1e6:,.1f} M parameters per token at "
            f"{FLOP_SHARE['prompt']:.0%} (prompt tokens) and {FLOP_SHARE['decode']:.0%} (generated tokens, at "
            f"max_gen_toks each) of the "
            f"{self.rate / 1e9:,.0f} GFLOP/s matmul rate measured on this device"
        )


# --- projection --------------------------------------------------------------------------------------------


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
    ll_shared, gen_shared = rates.sharing(setting.backend)
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
                shared = ll_shared if rt != "generate_until" else gen_shared
                prompt = counts["shared_tokens"] if shared else counts["tokens"]
                seconds = flop.seconds(prompt, counts["generated"])
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
    """Recording, aggregating, writing and the report, from the harness rates."""
    requests = sum(c.requests for c in costs)
    docs_plain = sum(c.docs for c in costs if not budgeted.get(c.task))
    docs_budget = sum(c.docs for c in costs if budgeted.get(c.task))
    proj.phases[progress.RECORDING] = h["record_s_per_request"] * requests
    proj.phases[progress.AGGREGATING] = (
        h["aggregate_s_per_doc"] * docs_plain + h["aggregate_s_per_doc_budget"] * docs_budget
    )
    proj.phases[progress.WRITING] = h["write_s_per_request"] * requests * (1 if log_samples else 0.05)
    if report:
        proj.phases[progress.REPORT] = h["report_s"] + h["report_s_per_request"] * requests


# --- the command's tasks, built as a run builds them ------------------------------------------------------


def configure(args: list[str]):
    """lm-eval's ``EvaluatorConfig`` of a ``belief-eval`` command line (as ``lm_eval run`` parses it)."""
    from belief_tasks.hooks.lm_eval_api import evaluator_config

    return evaluator_config(args)


def build_tasks(cfg) -> dict[str, Any]:
    """The command's tasks, built as ``belief-eval`` builds them before the model (bad input refused in one
    paragraph, exit 2), with lm-eval's per-run overrides applied (``--gen_kwargs``)."""
    manager = cfg.process_tasks(cfg.metadata)
    loaded = manager.load(cfg.tasks)
    tasks = dict(loaded["tasks"])
    gen = cfg.gen_kwargs
    if gen:
        from belief_tasks.hooks.lm_eval_api import parse_args_string

        gen = parse_args_string(gen) if isinstance(gen, str) else gen
        for task in tasks.values():
            if task.get_config("output_type") == "generate_until":
                task.set_config(key="generation_kwargs", value=gen, update=True)
    return tasks


def encoder_for(model_args: Mapping[str, Any], metadata: Mapping[str, Any] | None = None) -> Encoder | None:
    """The evaluated model's tokenizer and context length, without the model (None without a tokenizer)."""
    from belief_tasks.options import KnobError
    from belief_tasks.tasks.base import model_tokenizer

    try:
        tokenizer = model_tokenizer({**(metadata or {}), **model_args}, needed_for="the estimate")
    except KnobError:
        return None
    max_length = model_args.get("max_length") or model_args.get("max_model_len")
    if not max_length:
        from transformers import AutoConfig

        from belief_tasks.hooks.lm_eval_api import max_length as resolve_max_length

        try:
            config = AutoConfig.from_pretrained(
                str(model_args.get("pretrained") or model_args.get("model")),
                revision=model_args.get("revision") or "main",
            )
        except Exception:  # noqa: BLE001  the tokenizer's own limit, then lm-eval's default
            config = None
        max_length = resolve_max_length(config, tokenizer)
    add_bos = str(model_args.get("add_bos_token", "")).lower() in ("1", "true", "yes")
    return Encoder(tokenizer, int(max_length), add_bos)


def chat_template(encoder: Encoder):
    """lm-eval's ``HFLM.apply_chat_template``, from the tokenizer alone."""

    def apply(history, add_generation_prompt: bool = True) -> str:
        return encoder.tokenizer.apply_chat_template(
            history,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            continue_final_message=not add_generation_prompt,
        )

    return apply


def count_command(
    cfg, tasks: Mapping[str, Any], encoder: Encoder, *, shared: bool = True
) -> tuple[list[TaskCost], float]:
    """Every task's requests built (as ``evaluate`` builds them: ``--limit``, chat template) and counted; the
    seconds both took (a run's building of requests tokenises them too: the truncation check)."""
    from belief_tasks.hooks.lm_eval_api import sample_size as get_sample_size
    from belief_tasks.tasks.base import BeliefTask

    costs, built = [], 0.0
    for task in tasks.values():
        t0 = time.perf_counter()
        task.build_all_requests(
            limit=get_sample_size(task, cfg.limit),
            rank=0,
            world_size=1,
            cache_requests=False,
            rewrite_requests_cache=False,
            system_instruction=cfg.system_instruction,
            apply_chat_template=bool(cfg.apply_chat_template),
            fewshot_as_multiturn=cfg.fewshot_as_multiturn,
            chat_template=chat_template(encoder) if cfg.apply_chat_template else None,
            tokenizer_name=getattr(encoder.tokenizer, "name_or_path", "") if cfg.apply_chat_template else "",
        )
        family = task.FAMILY if isinstance(task, BeliefTask) else ""
        costs.append(count_task(task, encoder, family, shared=shared))
        built += time.perf_counter() - t0  # counting stands in for the run's truncation check (it tokenises too)
    return costs, built


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


def budgeted(tasks: Mapping[str, Any]) -> dict[str, bool]:
    from belief_tasks.tasks.base import BeliefTask

    return {n: isinstance(t, BeliefTask) and t.options.budget is not None for n, t in tasks.items()}


# --- calibration --------------------------------------------------------------------------------------------


def load_model(cfg):
    """The model as ``simple_evaluate`` creates it (no request cache)."""
    from lm_eval.api.registry import get_model

    extra = {"batch_size": cfg.batch_size, "max_batch_size": cfg.max_batch_size, "device": cfg.device}
    maker = get_model(cfg.model)
    if isinstance(cfg.model_args, dict):
        return maker.create_from_arg_obj(cfg.model_args, extra)
    return maker.create_from_arg_string(cfg.model_args or "", extra)


def calibration_docs(task, request_type: str, flop: Flop | None, encoder: Encoder, backend: str) -> list:
    """Instances of ``request_type`` of whole documents, spread over the task (every k-th document), until about
    ``CALIBRATION_SECONDS`` by the FLOP projection (one document at least, a quarter of them at most)."""
    by_doc: dict[int, list] = {}
    for inst in task.instances:
        if inst.request_type == request_type:
            by_doc.setdefault(inst.doc_id, []).append(inst)
    doc_ids = sorted(by_doc)
    if not doc_ids:
        return []
    cap = max(1, len(doc_ids) // 4)
    stride = max(1, len(doc_ids) // cap)
    chosen: list = []
    for i in doc_ids[::stride][:cap]:
        chosen.extend(by_doc[i])
        if flop is None:
            if len(chosen) >= 64:
                break
            continue
        c = count_instances(chosen, encoder)
        counts = {name: sum(getattr(k, name) for k in c.values()) for name in ("tokens", "shared_tokens", "generated")}
        ll, gen = rates.sharing(backend)
        prompt = counts["shared_tokens"] if (ll if request_type != "generate_until" else gen) else counts["tokens"]
        if flop.seconds(prompt, counts["generated"]) >= CALIBRATION_SECONDS:
            break
    return chosen


def calibrate(
    cfg, tasks: Mapping[str, Any], setting: Setting, encoder: Encoder, flop: Flop | None, store: rates.Store, say
) -> rates.ModelRates:
    """Load the model, time a few seconds of each family's requests per request type, store the rates."""
    from belief_tasks.tasks.base import BeliefTask

    t0 = time.perf_counter()
    lm = load_model(cfg)
    load_s = time.perf_counter() - t0
    say(f"calibration: model loaded in {load_s:.1f} s")
    subsets: dict[tuple[str, str], list] = {}
    for task in tasks.values():
        family = task.FAMILY if isinstance(task, BeliefTask) else ""
        for rt in sorted({i.request_type for i in task.instances}):
            subsets.setdefault((family, rt), []).extend(calibration_docs(task, rt, flop, encoder, setting.backend))
    for (_family, rt), insts in subsets.items():  # warm-up: the first call of a kind pays one-time costs
        if insts:
            getattr(lm, rt)([insts[0]] * 1)
            break
    per_unit = {}
    for (family, rt), insts in sorted(subsets.items()):
        if not insts:
            continue
        expanded = [i for i in insts for _ in range(max(1, int(i.repeats or 1)))]
        c = count_instances(insts, encoder)
        counts = {name: sum(getattr(k, name) for k in c.values()) for name in ("tokens", "shared_tokens", "generated")}
        units = rates.units(counts, rt, setting.backend)
        t0 = time.perf_counter()
        getattr(lm, rt)(expanded)
        took = time.perf_counter() - t0
        per_unit[f"{family}|{rt}"] = took / max(units, 1)
        say(f"calibration: {family or 'other'} {rt}: {len(expanded)} requests, {units:,} units in {took:.1f} s")
    rates_ = store.record_calibration(setting.key(), setting.label(), per_unit, load_s, matmul_rate(setting.device))
    store.save()
    return rates_


# --- the estimate command -----------------------------------------------------------------------------------


def run_estimate(args: list[str], flags: Mapping[str, Any], report: bool = False, out=None) -> int:
    """``belief-eval --estimate ARGS``: print the command's cost and its projected time, then exit 0."""
    out = out or sys.stdout
    started = time.perf_counter()

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    cfg = configure(args)
    setting = setting_from_args(args)
    t0 = time.perf_counter()
    tasks = build_tasks(cfg)
    build_s = time.perf_counter() - t0
    encoder = encoder_for(setting.model_args, cfg.metadata)
    if encoder is None:
        say(
            "belief-eval --estimate: no tokenizer for this model (give pretrained=... or tokenizer=... in "
            "--model_args): requests are counted, tokens are not"
        )
        return 2
    costs, requests_s = count_command(cfg, tasks, encoder)
    store = rates.Store.load()
    key = setting.key()
    model_rates = store.models.get(key)
    params = parameters(setting.model_args)
    now = matmul_rate(setting.device)  # half a second: the device's speed now (a shared machine's load)
    flop = Flop(params, now) if params and now and (flags.get("calibrate") or model_rates is None) else None
    if flags.get("calibrate"):
        model_rates = calibrate(cfg, tasks, setting, encoder, flop, store, say)
    proj = projection(costs, setting, model_rates, flop, store, cfg, tasks, build_s, requests_s, report, now)
    store = rates.Store.load()  # a calibration may have written it meanwhile
    store.record_command(rates.command_key(args), proj.phases)
    try:
        store.save()
    except OSError:
        pass  # a read-only cache: the run will not show these estimates before its requests are counted
    lines = render(costs, proj, setting, cfg)
    for line in lines:
        say(line)
    say(f"(this estimate took {duration(time.perf_counter() - started)}; nothing was scored)")
    if flags.get("json"):
        Path(flags["json"]).write_text(json.dumps(as_json(costs, proj, setting), indent=1))
    return 0


def projection(
    costs,
    setting: Setting,
    model_rates,
    flop,
    store: rates.Store,
    cfg,
    tasks,
    build_s: float,
    requests_s: float,
    report: bool,
    now: float | None = None,
) -> Projection:
    h, h_source = harness_rates(store, now)
    proj = Projection()
    proj.phases[progress.BUILDING_TASKS] = build_s
    load = (
        model_rates.model_load_s * rates.contention(model_rates.matmul, now)
        if model_rates is not None and model_rates.model_load_s
        else None
    )
    if load is None:
        size = weights_bytes(setting.model_args)
        load = h["model_load_s_per_gb"] * size / 1e9 if size else None
    if load is not None:
        proj.phases[progress.LOADING_MODEL] = load
    proj.phases[progress.BUILDING_REQUESTS] = requests_s
    project_scoring(costs, setting, model_rates, flop, proj, now)
    project_harness(costs, h, log_samples=bool(cfg.log_samples), report=report, budgeted=budgeted(tasks), proj=proj)
    proj.phases = {"startup": h["startup_s"], **proj.phases}
    proj.sources.append(h_source)
    return proj


def render(costs: Sequence[TaskCost], proj: Projection, setting: Setting, cfg) -> list[str]:
    ll_shared, gen_shared = rates.sharing(setting.backend)
    lines = [
        f"Estimate for {setting.label()}",
        "",
        "| task | facts | requests by kind | tokens to compute: without / with prefix sharing "
        "| generated (at most) | projected |",
        "| --- | ---: | --- | --- | ---: | ---: |",
    ]
    for c in costs:
        kinds = by_kind_order(c.kinds)
        reqs = ", ".join(f"{c.kinds[k].requests:,} {k}" for k in kinds)
        toks = ", ".join(f"{c.kinds[k].tokens:,} / {c.kinds[k].shared_tokens:,}" for k in kinds)
        gen = sum(c.kinds[k].generated for k in kinds)
        secs = sum(proj.by_task.get(c.task, {}).values())
        projected = duration(secs) if c.task in proj.by_task else "?"
        lines.append(f"| {c.task} | {c.facts:,} | {reqs} | {toks} | {gen:,} | {projected} |")
    t = totals(costs)
    order = by_kind_order(t)
    lines.append(
        f"| all | {sum(c.facts for c in costs):,} | "
        + ", ".join(f"{t[k].requests:,} {k}" for k in order)
        + " | "
        + ", ".join(f"{t[k].tokens:,} / {t[k].shared_tokens:,}" for k in order)
        + f" | {sum(k.generated for k in t.values()):,} | |"
    )
    lines += [
        "",
        f"{setting.backend} computes log-likelihood tokens {'with' if ll_shared else 'without'} prefix "
        f"sharing and generation prompts {'once per prompt' if gen_shared else 'once per request'}.",
        "",
        "| phase | projected |",
        "| --- | ---: |",
    ]
    lines += [f"| {name} | {duration(sec)} |" for name, sec in proj.phases.items()]
    lines.append(f"| **total** | **{duration(proj.total)}** |")
    lines += ["", "Rates: " + "; ".join(proj.sources) + "."]
    pairs = shared_facts(costs)
    if pairs:
        lines += ["", "Facts shared between probes (what the report's agreement joins, counted from the documents):"]
        lines += [f"  {a} / {b}: {n:,}" for a, b, n in pairs]
    return lines


def as_json(costs: Sequence[TaskCost], proj: Projection, setting: Setting) -> dict[str, Any]:
    return {
        "setting": setting.label(),
        "backend": setting.backend,
        "tasks": [c.as_dict() for c in costs],
        "by_task": proj.by_task,
        "phases": proj.phases,
        "total_s": proj.total,
        "sources": proj.sources,
        "shared_facts": [{"a": a, "b": b, "facts": n} for a, b, n in shared_facts(costs)],
    }


# --- a run's plan and its rates ----------------------------------------------------------------------------


@dataclass
class RunPlan:
    """What a run planned at its first scoring call (kept to store its rates at the end)."""

    setting: Setting
    projection: Projection
    harness: dict[str, float] = field(default_factory=dict)
    matmul: float | None = None  # the device's matmul rate when the run was planned


_plan: RunPlan | None = None
#: the open run's command (``rates.command_key``), set by ``begin_run``
_command: str | None = None
#: harness rates each harness phase is projected with (scaled by measured / projected after a run)
PHASE_RATES = {
    progress.RECORDING: ("record_s_per_request",),
    progress.AGGREGATING: ("aggregate_s_per_doc", "aggregate_s_per_doc_budget"),
    progress.WRITING: ("write_s_per_request",),
    progress.REPORT: ("report_s", "report_s_per_request"),
}


def first_process() -> bool:
    """Whether this is the first process of its launch (``accelerate launch`` / torchrun set ``RANK``)."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def begin_run(args: Sequence[str], report: bool) -> progress.Progress:
    """Open a ``belief-eval`` run's progress: the phases this command took last time (or its ``--estimate``
    projected) are its first estimates, replaced by a fresh projection once its requests are counted
    (``watcher``, ``plan_run``)."""
    global _command, _plan
    _command, _plan = rates.command_key(args), None
    run = progress.start(on_evaluate=watcher(setting_from_args(args), report))
    if not first_process():
        run.out = open(os.devnull, "w")  # noqa: SIM115  one process of a launch speaks (and stores rates)
    before = rates.Store.load().commands.get(_command)
    if before:
        run.set_plan({k: v for k, v in before.items() if k in progress.PHASES and (report or k != progress.REPORT)})
    return run


def plan_run(lm, tasks: Sequence[Any], setting: Setting, report: bool) -> None:
    """At a run's first scoring call: count its requests with the model's own tokenizer, project every phase
    still to run, and hand the estimates to the run's progress."""
    global _plan
    run = progress.current()
    if run is None:
        return
    from belief_tasks.hooks.lm_eval_api import model_behind_cache
    from belief_tasks.tasks.base import BeliefTask

    inner = model_behind_cache(lm)
    tokenizer = getattr(inner, "tokenizer", None)
    if getattr(inner, "rank", 0) != 0:
        run.out = open(os.devnull, "w")  # noqa: SIM115  one process of a launch speaks
    if tokenizer is None or not hasattr(tokenizer, "encode"):
        run.say("no estimate: this backend has no tokenizer to count its requests with")
        return
    encoder = Encoder(tokenizer, int(getattr(inner, "max_length", 2048)), bool(getattr(inner, "add_bos_token", False)))
    t0 = time.perf_counter()
    costs = []
    for task in tasks:
        family = task.FAMILY if isinstance(task, BeliefTask) else ""
        docs = list(task.eval_docs) if hasattr(task, "eval_docs") else []
        from belief_tasks.planning.cost import task_facts

        facts, _ = task_facts(docs)
        costs.append(
            TaskCost(
                task.config.task,
                family,
                facts,
                len(docs),
                count_instances(task.instances, encoder, shared=rates.sharing(setting.backend)[0]),
            )
        )
    counted = time.perf_counter() - t0
    store = rates.Store.load()
    model_rates = store.models.get(setting.key())
    now = matmul_rate(setting.device)
    params = parameters(setting.model_args) if model_rates is None else None
    flop = Flop(params, now) if params and now else None
    proj = Projection()
    project_scoring(costs, setting, model_rates, flop, proj, now)
    h, h_source = harness_rates(store, now)
    budget = {c.task: isinstance(t, BeliefTask) and t.options.budget is not None for c, t in zip(costs, tasks)}
    project_harness(costs, h, log_samples=True, report=report, budgeted=budget, proj=proj)
    proj.sources.append(h_source)
    notes = {}
    for rt, by_family in proj.units.items():
        reqs = sum(request_types(c).get(rt, {}).get("requests", 0) for c in costs)
        notes[progress.scoring_phase(rt)] = f"{reqs:,} requests, {sum(by_family.values()):,} units"
    _plan = RunPlan(setting, proj, h, now)
    run.set_plan(
        proj.phases,
        notes,
        f"counted {sum(c.requests for c in costs):,} requests in {counted:.1f} s; rates: " + "; ".join(proj.sources),
    )


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
        harness = {}
        for phase, names in PHASE_RATES.items():
            projected, took = plan.projection.phases.get(phase), measured.get(phase)
            if projected and took:
                harness.update({n: plan.harness[n] * took / projected for n in names})
        if measured.get(progress.STARTUP):
            harness["startup_s"] = measured[progress.STARTUP]
        if plan.matmul:  # what this run did not measure is rescaled to this run's device speed
            old = store.harness.get(machine(), {})
            scale = rates.contention(old.get("matmul"), plan.matmul)
            harness = {**{k: v * scale for k, v in old.items() if k != "matmul"}, **harness, "matmul": plan.matmul}
        size = weights_bytes(plan.setting.model_args)
        if measured.get(progress.LOADING_MODEL) and size:
            harness["model_load_s_per_gb"] = measured[progress.LOADING_MODEL] / (size / 1e9)
        store.record_harness(machine(), harness)
    try:
        store.save()
    except OSError:
        pass  # a read-only cache loses the rates, never the run


def tasks_of(task_dict) -> list:
    """The tasks of ``evaluate``'s ``task_dict`` (``{"tasks": {name: task}, ...}``, or an older nesting)."""
    from lm_eval.api.task import Task

    if isinstance(task_dict, Mapping) and isinstance(task_dict.get("tasks"), Mapping):
        return [t for t in task_dict["tasks"].values() if isinstance(t, Task)]
    out, todo = [], [task_dict]
    while todo:
        item = todo.pop()
        if isinstance(item, Task):
            out.append(item)
        elif isinstance(item, Mapping):
            todo.extend(item.values())
        elif isinstance(item, (list, tuple)):
            todo.extend(item)
    return out


#: lm-eval's request methods a run's progress watches
REQUEST_METHODS = ("loglikelihood", "loglikelihood_rolling", "generate_until", "per_token_loglikelihood")


def watcher(setting: Setting, report: bool):
    """``progress.start``'s ``on_evaluate`` for a ``belief-eval`` run: when lm-eval's ``evaluate`` begins, the
    model's request methods are wrapped (on the instance, undone when it ends) so that the first scoring call
    plans the run (``plan_run``) and each request type's call begins its phase."""

    def on_evaluate(lm, task_dict):
        tasks = tasks_of(task_dict)
        planned, added = [False], []

        def wrap(name: str, original):
            def call(requests, *args, **kwargs):
                if not progress.is_building():  # a server probe while a task builds is not the scoring
                    if not planned[0]:
                        planned[0] = True
                        try:
                            plan_run(lm, tasks, setting, report)
                        except Exception as e:  # noqa: BLE001  a plan that fails loses the ETA, never the run
                            if (shown := progress.current()) is not None:
                                shown.say(f"no estimate: {type(e).__name__}: {e}")
                    progress.phase(progress.scoring_phase(name))
                return original(requests, *args, **kwargs)

            return call

        for name in REQUEST_METHODS:
            if name in vars(lm):
                continue
            try:
                original = getattr(lm, name)
            except AttributeError:
                continue
            setattr(lm, name, wrap(name, original))
            added.append(name)

        def undo() -> None:
            for name in added:
                vars(lm).pop(name, None)

        return undo

    return on_evaluate
