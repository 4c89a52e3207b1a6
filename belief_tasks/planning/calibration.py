"""``--calibrate``: the model loaded and a few seconds of the command's own requests timed, per family and request
type; the rates are stored (``planning.rates``) for the estimate and the runs after it."""

from __future__ import annotations

import time
from typing import Any, Mapping

from belief_tasks.planning import rates
from belief_tasks.planning.cost import Encoder, combined, count_instances
from belief_tasks.planning.flops import Flop, matmul_rate
from belief_tasks.planning.setting import Setting

#: seconds of the command's own requests a calibration times per family and request type (at least one document)
CALIBRATION_SECONDS = 2.0


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
        counts = combined(count_instances(chosen, encoder))
        if flop.seconds(rates.units(counts, request_type, backend), request_type) >= CALIBRATION_SECONDS:
            break
    return chosen


def calibrate(
    cfg, tasks: Mapping[str, Any], setting: Setting, encoder: Encoder, flop: Flop | None, store: rates.Store, say
) -> rates.ModelRates:
    """Load the model, time a few seconds of each family's requests per request type, store the rates."""
    from belief_tasks.hooks.lm_eval_api import model_behind_cache
    from belief_tasks.planning.run_plan import engine_block_size
    from belief_tasks.tasks.base import BeliefTask

    t0 = time.perf_counter()
    lm = load_model(cfg)
    load_s = time.perf_counter() - t0
    say(f"calibration: model loaded in {load_s:.1f} s")
    sharing, block_size = setting.loglikelihood_sharing(engine_block_size(model_behind_cache(lm)))
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
        units = rates.units(combined(count_instances(insts, encoder, sharing, block_size)), rt, setting.backend)
        t0 = time.perf_counter()
        getattr(lm, rt)(expanded)
        took = time.perf_counter() - t0
        per_unit[f"{family}|{rt}"] = took / max(units, 1)
        say(f"calibration: {family or 'other'} {rt}: {len(expanded)} requests, {units:,} units in {took:.1f} s")
    rates_ = store.record_calibration(setting.key(), setting.label(), per_unit, load_s, matmul_rate(setting.device))
    store.save()
    return rates_
