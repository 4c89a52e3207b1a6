"""``belief-eval --estimate``: a command's cost before the model loads.

``belief-eval --estimate ARGS`` takes the arguments of a run. It builds the tasks and their requests exactly as
the run would (``planning.command_tasks``: bad input is refused the same way), counts them (``planning.cost``: per
task the facts, the requests by kind, the tokens to compute with and without prefix sharing), projects the time of
every phase (``planning.projection``), prints it and exits, before any model is loaded. The model's phases come
from rates (``planning.rates``), in this order:

1. rates stored for this model, backend and setting by an earlier run or calibration;
2. ``--calibrate``: the model is loaded and a few seconds of the command's own requests are timed
   (``planning.calibration``); the rates are stored for the next estimate and run;
3. otherwise a FLOP projection, labelled as such (``planning.flops``).

The estimate also stores its projection for the command (``rates.Store.record_command``), so that the run shows
estimates from its first phase on; a run makes its own projection once its requests are built
(``planning.run_plan``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from belief_tasks.planning import rates
from belief_tasks.planning.calibration import calibrate
from belief_tasks.planning.command_tasks import budgeted, build_tasks, configure, count_command, encoder_for
from belief_tasks.planning.cost import TaskCost, by_kind_order, shared_facts, totals
from belief_tasks.planning.flops import Flop, matmul_rate, parameters
from belief_tasks.planning.progress import BUILDING_REQUESTS, BUILDING_TASKS, duration
from belief_tasks.planning.projection import Projection, project
from belief_tasks.planning.setting import Setting, setting_from_args


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
    sharing, block_size = setting.loglikelihood_sharing()
    # a backend that shares no prefix is shown what hf-shared's tree would save
    costs, requests_s = count_command(cfg, tasks, encoder, sharing=sharing or rates.TREE, block_size=block_size)
    now = matmul_rate(setting.device)  # half a second: the device's speed now (a shared machine's load)
    params = parameters(setting.model_args)
    flop = Flop(params, now, setting.backend, setting.batch_size) if params and now else None
    if flags.get("calibrate"):
        calibrate(cfg, tasks, setting, encoder, flop, rates.Store.load(), say)
    store = rates.Store.load()  # with what a calibration just wrote
    proj, _ = project(
        costs,
        setting,
        store,
        flop=flop,
        now=now,
        budgeted=budgeted(tasks),
        log_samples=bool(cfg.log_samples),
        report=report,
        before={BUILDING_TASKS: build_s, BUILDING_REQUESTS: requests_s},
    )
    store.record_command(rates.command_key(args), proj.phases)
    try:
        store.save()
    except OSError:
        pass  # a read-only cache: the run will not show these estimates before its requests are counted
    for line in render(costs, proj, setting):
        say(line)
    say(f"(this estimate took {duration(time.perf_counter() - started)}; nothing was scored)")
    if flags.get("json"):
        Path(flags["json"]).write_text(json.dumps(as_json(costs, proj, setting), indent=1))
    return 0


def render(costs: Sequence[TaskCost], proj: Projection, setting: Setting) -> list[str]:
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
