"""The shares of the matmul rate a backend reaches, per family and request type: the FLOP projection's constants.

``belief-eval --estimate`` without a measured rate projects a phase from FLOPs: 2 x parameters per unit of work
(``rates.units``: the tokens the backend computes, plus each generation's tokens at their ``max_gen_toks`` bound) at
a share of the matmul rate measured on the device (``planning.flops.FLOP_SHARE``). This script measures those
shares: it builds the tasks' requests, loads the model once, runs each family's requests of each type in one call
and divides their FLOPs by the time they took times the matmul rate of a 1024 x 1024 float32 matmul measured
before and after. Both per CPU-second of this process (steady on a shared machine; with vLLM's engine in this
process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here) and per second of wall clock.

    python -m benchmarks flop_shares --model hf-shared --batch_size auto --tasks belief_demo \\
        --metadata '{"source": "sample"}' --json shares.json
    .venv-vllm/bin/python -m benchmarks flop_shares --model vllm-shared --batch_size auto --tasks belief_demo_bear \\
        --model_args enforce_eager=True,gpu_memory_utilization=0.3,max_model_len=2048,enable_chunked_prefill=False

The bundled model (float32) unless ``--model_args`` names another (``pretrained=...``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's belief_tasks, as other scripts do
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process: its CPU time is ours


def built_tasks(names: str, metadata: dict) -> list:
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tasks = TaskManager(include_path=str(task_yamls_dir()), metadata=metadata).load(names.split(","))["tasks"]
    for task in tasks.values():
        task.build_all_requests(limit=None, rank=0, world_size=1)
    return list(tasks.values())


def timed(call) -> tuple[float, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - w0, time.process_time() - c0


def measure(lm, groups: dict, setting, encoder, params: int) -> list[dict]:
    """Per (family, request type): units, seconds (wall, CPU) and the shares of the matmul rate."""
    from belief_tasks.planning import rates
    from belief_tasks.planning.cost import combined, count_instances
    from belief_tasks.planning.flops import matmul_rates
    from belief_tasks.planning.run_plan import engine_block_size

    sharing, block = setting.loglikelihood_sharing(engine_block_size(lm))
    first = next(iter(groups.values()))
    getattr(lm, first[0].request_type)(first[:1])  # one-time costs (first forward, the engine's warm-up)
    rows = []
    for (family, rt), insts in sorted(groups.items()):
        counts = combined(count_instances(insts, encoder, sharing, block))
        units = rates.units(counts, rt, setting.backend)
        before = matmul_rates(setting.device)
        expanded = [i for i in insts for _ in range(max(1, int(i.repeats or 1)))]
        wall, cpu = timed(lambda rt=rt, expanded=expanded: getattr(lm, rt)(expanded))
        after = matmul_rates(setting.device)
        mm_wall, mm_cpu = ((before[i] or 0) / 2 + (after[i] or 0) / 2 for i in (0, 1))
        flop = 2.0 * params * units
        rows.append(
            {
                "family": family,
                "request_type": rt,
                "requests": len(expanded),
                "units": units,
                "generated_bound": counts["generated"],
                "wall_s": wall,
                "cpu_s": cpu,
                "matmul_wall": mm_wall,
                "matmul_cpu": mm_cpu,
                "share_cpu": flop / (cpu * mm_cpu) if cpu and mm_cpu else None,
                "share_wall": flop / (wall * mm_wall) if wall and mm_wall else None,
            }
        )
        r = rows[-1]
        print(
            f"{family} {rt}: {r['requests']} requests, {units:,} units, {wall:.1f} s wall, {cpu:.1f} s CPU; share "
            f"{r['share_cpu'] or 0:.2f} per CPU-second, {r['share_wall'] or 0:.2f} per wall second",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="hf-shared")
    p.add_argument("--model_args", default="")
    p.add_argument("--batch_size", default="auto")
    p.add_argument("--device", default="cpu")
    p.add_argument("--tasks", default="belief_demo")
    p.add_argument("--metadata", default='{"source": "sample"}')
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    import belief_tasks

    belief_tasks.install()
    import lm_eval.api.registry

    from belief_tasks.commands.default_model import default_model_path
    from belief_tasks.hooks.answer_cache import parse_model_args
    from belief_tasks.hooks.truncation import model_behind_cache
    from belief_tasks.planning.cost import Encoder
    from belief_tasks.planning.flops import parameters
    from belief_tasks.planning.setting import Setting

    model_args = {"pretrained": str(default_model_path()), "dtype": "float32", **parse_model_args([args.model_args])}
    setting = Setting(args.model, model_args, args.batch_size, args.device)
    tasks = built_tasks(args.tasks, {**json.loads(args.metadata), "pretrained": model_args["pretrained"]})
    groups: dict = {}
    for task in tasks:
        for inst in task.instances:
            groups.setdefault((getattr(task, "FAMILY", ""), inst.request_type), []).append(inst)
    extra = {"batch_size": args.batch_size, "device": args.device}
    lm = lm_eval.api.registry.get_model(args.model).create_from_arg_obj(model_args, extra)
    inner = model_behind_cache(lm)
    encoder = Encoder(inner.tokenizer, int(inner.max_length), bool(getattr(inner, "add_bos_token", False)))
    rows = measure(lm, groups, setting, encoder, parameters(model_args) or 0)
    if args.json:
        args.json.write_text(json.dumps({"setting": setting.label(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
