"""lm-eval's ``hf``, our ``hf-shared`` and lm-eval's ``vllm`` (the offline engine) on the same workloads,
in one sitting on one machine.

Workloads (built by ``workloads.py``, as ``shared`` builds them, plus the MONITOR task's own requests):

* IC-LKE: per fact, 100 object options after 50 demonstrations (log-likelihoods);
* BEAR: every answer-space entity of the fact's relation in its first template (log-likelihoods);
* BELIEF-ICL: a greedy answer and K seeded samples per prompt (generations);
* MONITOR: ``belief_demo_monitor``'s requests as the task builds them (anchor prefixes scored,
  greedy answers under the contexts).

Each arm runs in its own process (a fresh interpreter: nothing cached between arms), which loads the
backend (start-up: wall seconds, reported apart) and then runs every workload in turn (steady state: wall
seconds, requests per second). Peak memory is the largest resident set of the process and all its
children (vLLM's engine core runs in a child process), sampled every 0.1 s while a workload runs. The
arms run in rotating order for ``--rounds`` rounds, and the table reports medians and the ratio of each
arm's throughput to vLLM's measured in the same rounds. Outputs are compared across arms (log-likelihoods,
predictions, greedy texts).

    python -m benchmarks engines --quick                    # a minute or two per arm
    python -m benchmarks engines --facts 6 --instances 60 --prompts 6 --samples 20 --monitor_limit 4
    python -m benchmarks engines --save_requests req.json   # the workloads alone (no model; then --requests)
    python -m benchmarks engines --projection               # token counts and the 8B projection (tokenizer only)
    python -m benchmarks engines --arms hf,hf-shared --requests req.json --model DIR --device cuda --dtype bfloat16

The workloads are built once by the parent and handed to every arm in a file (``--requests`` reads a saved
one instead: a machine without the task data or the harness's task index can still run the arms).
With ``--rounds`` above 1 each arm's outputs of every round are compared with its first round's (seeded
samples included): the same command must give the same outputs.

vLLM runs in the environment that has it (``--vllm_python``; ``scripts/setup_vllm.sh`` makes
``.venv-vllm``); the hf arms in the environment running the benchmark unless ``--hf_python`` names another.
Run all arms with one interpreter for the fairest comparison (``--hf_python`` = ``--vllm_python``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import measure, workloads
from benchmarks.workloads import ROOT

ARMS = ("hf", "hf-shared", "vllm", "vllm-shared")
WORKLOADS = ("iclke", "bear", "belief", "monitor")  # and, asked by name, "iclke_demo" (belief_demo_iclke whole)
#: vLLM on a small CPU (the engine's defaults reserve GPU-sized memory and CUDA graphs)
#: (as docs/backends_support.md: a 1 GiB KV cache, no core reserved for the engine, its threads on the cores)
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_OMP_THREADS_BIND": "0-1"}
VLLM_ARGS = {
    "enforce_eager": True,
    "gpu_memory_utilization": 0.3,
    "max_model_len": 2048,
    "dtype": "float32",
    "enable_chunked_prefill": False,
}  # vllm-cpu 0.32 kills its engine on a seeded request whose prefill was chunked


# ------------------------------------------------------------------ workloads (no model)


#: the workloads' sizes by default, and with --quick
SIZES = workloads.Sizes(facts=6, instances=60, prompts=6, samples=20, monitor_limit=4)
QUICK = workloads.Sizes(facts=2, instances=10, prompts=2, samples=4, monitor_limit=1)


def build_workloads(args) -> dict[str, dict]:
    """name -> {"title", "requests": [(request type, args)], "groups": sizes of option groups or None}."""
    names = args.workloads.split(",")
    if args.requests:  # built earlier (``--save_requests``); JSON lists back to tuples
        saved = json.loads(Path(args.requests).read_text())
        for w in saved.values():
            w["requests"] = [(kind, tuple(a)) for kind, a in w["requests"]]
        return {k: v for k, v in saved.items() if k in names}
    builders = {
        "iclke": lambda: option_workload(
            f"IC-LKE: {args.facts} facts x {args.options} options after 50 demonstrations",
            workloads.iclke_requests(workloads.sample_facts(), args.facts, args.options),
        ),
        "bear": lambda: option_workload(
            f"BEAR: {args.instances} instances x full answer space",
            workloads.bear_requests(workloads.sample_facts(), args.instances),
        ),
        "belief": lambda: belief_workload(args.prompts, args.samples),
        "monitor": lambda: {
            "title": f"MONITOR: belief_demo_monitor --limit {args.monitor_limit}",
            "requests": workloads.task_requests("belief_demo_monitor", args.monitor_limit),
            "groups": None,
        },
        "iclke_demo": iclke_demo,  # asked by name only: the demo's IC-LKE task, all its facts (12 on the sample)
    }
    unknown = sorted(set(names) - set(builders))
    if unknown:
        raise SystemExit(f"--workloads: no workload named {', '.join(unknown)} (there are {', '.join(builders)})")
    return {name: builders[name]() for name in builders if name in names}


def option_workload(title: str, groups: list[list[tuple[str, str]]]) -> dict:
    """A log-likelihood workload of option groups (an instance's options: its prediction is the likeliest)."""
    return {
        "title": title,
        "requests": [("loglikelihood", r) for g in groups for r in g],
        "groups": [len(g) for g in groups],
    }


def belief_workload(n_prompts: int, samples: int) -> dict:
    prompts = workloads.belief_prompts(workloads.sample_facts(), n_prompts)
    return {
        "title": f"BELIEF-ICL: {n_prompts} prompts x (greedy + {samples} seeded samples)",
        "requests": workloads.belief_requests(prompts, samples),
        "groups": None,
        "greedy": len(prompts),
    }


def iclke_demo() -> dict:
    demo = workloads.task_requests("belief_demo_iclke", None, {"source": "sample"})
    sizes = [sum(1 for _ in g) for _, g in itertools.groupby(demo, key=lambda r: r[1][0])]
    return {"title": f"IC-LKE: belief_demo_iclke, {len(sizes)} facts", "requests": demo, "groups": sizes}


# ------------------------------------------------------------------ one arm (a worker process)


class GPUMemory:
    """Peak memory torch allocated on the GPU since the last reset (None off CUDA)."""

    def __init__(self, device: str):
        import torch

        self.on = device.startswith("cuda") and torch.cuda.is_available()

    def reset(self) -> None:
        if self.on:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def peak_mb(self) -> float | None:
        if not self.on:
            return None
        import torch

        return torch.cuda.max_memory_allocated() / 2**20


def load_backend(arm: str, args):
    import torch

    torch.set_num_threads(args.threads)
    path, device, dtype = args.model, args.device, args.dtype
    softmax = {"softmax_dtype": args.softmax_dtype} if args.softmax_dtype else {}
    if arm == "hf":
        from lm_eval.models.huggingface import HFLM

        return HFLM(
            pretrained=path, device=device, dtype=dtype, batch_size=args.hf_batch_size, max_batch_size=64, **softmax
        )
    if arm == "hf-shared":
        from belief_tasks.backends.shared import HFSharedPrefixLM

        return HFSharedPrefixLM(
            pretrained=path,
            device=device,
            dtype=dtype,
            batch_size="auto",
            max_batch_size=64,
            max_batch_tokens=args.max_batch_tokens,
            min_shared_tokens=args.min_shared_tokens,
            **softmax,
        )
    if arm == "vllm-shared":  # our vllm backend: log-likelihoods read vLLM's prefix cache (its CPU block: 32)
        from belief_tasks.backends.vllm_shared import VLLMSharedPrefixLM

        return VLLMSharedPrefixLM(pretrained=path, batch_size="auto", **{**VLLM_ARGS, "dtype": dtype})
    from lm_eval.models.vllm_causallms import VLLM

    return VLLM(pretrained=path, batch_size="auto", **{**VLLM_ARGS, "dtype": dtype})


def worker(args) -> None:
    from lm_eval.api.instance import Instance

    import belief_tasks

    belief_tasks.install()  # seeded samples on hf, as belief-eval runs them
    built = build_workloads(args)
    memory = measure.PeakMemory()
    gpu = GPUMemory(args.device)
    wall = time.perf_counter()
    lm = load_backend(args.worker, args)
    # warm-up, counted in start-up: one short request of each type (first-call costs: kernels, buffers)
    lm.loglikelihood([Instance("loglikelihood", {}, ("Paris is", " a city"), 0)], disable_tqdm=True)
    lm.generate_until(
        [Instance("generate_until", {}, ("Paris is", {"until": ["\n"], "max_gen_toks": 4}), 0)], disable_tqdm=True
    )
    result = {
        "arm": args.worker,
        "startup_s": time.perf_counter() - wall,
        "startup_peak_mb": memory.peak / 2**20,
        "startup_gpu_peak_mb": gpu.peak_mb(),
        "workloads": {},
    }
    print(f"{args.worker} start-up: {result['startup_s']:.1f} s", file=sys.stderr, flush=True)
    for name, w in built.items():
        result["workloads"][name] = run_workload(lm, w, args, memory, gpu)
        print(
            f"{args.worker} {name}: {len(w['requests'])} requests in {result['workloads'][name]['wall_s']:.1f} s, "
            f"{result['workloads'][name]['cpu_s']:.1f} CPU-s",
            file=sys.stderr,
            flush=True,
        )
    Path(args.out).write_text(json.dumps(result))


def run_workload(lm, w: dict, args, memory: measure.PeakMemory, gpu: GPUMemory) -> dict:
    """One workload on the arm's backend, its request types one after the other: wall and CPU seconds, peak
    memory, every output in the workload's order (and, with ``--count``, what it asked of the device)."""
    if args.count:
        from benchmarks import counting
    by_type: dict[str, list] = {}
    for i, (kind, a) in enumerate(w["requests"]):
        by_type.setdefault(kind, []).append(workloads.bench_instance(kind, a, i))
    memory.reset()
    gpu.reset()
    outputs: dict[int, object] = {}
    passes: dict[str, dict] = {}  # --count: per request type, its timed pass (forwards)
    counts = getattr(lm, "cache_counts", None)
    if counts is not None:  # vllm-shared: its counts per workload
        lm.cache_counts = type(counts)()
    cpu, wall = memory.cpu(), time.perf_counter()
    for kind, instances in by_type.items():

        def run(kind=kind, instances=instances):
            return getattr(lm, kind)(instances, disable_tqdm=True)

        passes[kind] = counting.timed_pass(lm.model, run) if args.count else {"outputs": run()}
        for inst, out in zip(instances, passes[kind]["outputs"]):
            outputs[inst.idx] = out
    seconds, cpu = time.perf_counter() - wall, memory.cpu() - cpu
    result = {
        "wall_s": seconds,
        "cpu_s": cpu,
        "requests": len(w["requests"]),
        "peak_mb": memory.peak / 2**20,
        "gpu_peak_mb": gpu.peak_mb(),
        "outputs": [outputs[i] for i in range(len(w["requests"]))],
        "cache_counts": cache_report(lm, by_type) if counts is not None else None,
    }
    if args.count:
        result["counts"] = counting.count_workload(lm, by_type, passes)
    return result


def cache_report(lm, by_type: dict) -> dict:
    """vllm-shared: its counts of the workload (tokens computed, recomputed requests), and the same passes'
    arithmetic (``prefix_cache_plan.simulate``) at the engine's block size (a check of the model) and at 16."""
    from belief_tasks.backends.prefix_cache_plan import simulate
    from belief_tasks.requests import encode_requests

    out = dict(vars(lm.cache_counts))
    pairs = list(
        encode_requests(
            lm, [i.args for kind in ("loglikelihood", "per_token_loglikelihood") for i in by_type.get(kind, [])]
        )
    )
    if not pairs:  # a workload of generation only (BELIEF-ICL): nothing read the cache, no block size was set
        return out
    seqs, ctxlens = [c + t for c, t in pairs], [len(c) for c, _ in pairs]
    for b in sorted({out["block_size"], 16}):
        out[f"simulated_{b}"] = vars(simulate(seqs, ctxlens, b))
    return out


# ------------------------------------------------------------------ tokens, and the 8B-on-a-GPU projection

#: the projection's model and GPU (stated, not measured): a Llama-3-8B-sized model, bf16, on one H100
PARAMS_8B = 8.03e9
SUSTAINED_FLOP_S = 400e12  # ~40% of an H100 SXM's 989 TFLOP/s dense bf16 peak, a typical sustained prefill
WEIGHT_BYTES_8B = 2 * PARAMS_8B  # bf16
HBM_BYTES_S = 3.35e12  # H100 SXM memory bandwidth: each decode step reads all weights once


def token_counts(built: dict, model: str) -> dict[str, dict]:
    """Per workload: tokens fed with full prefills (every request alone), the distinct tokens a prefix-sharing
    engine must feed (the trie of all sequences, the floor of the work), the decode steps of generations."""
    from transformers import AutoTokenizer

    from belief_tasks.backends.prefix_tree import distinct_tokens

    tok = AutoTokenizer.from_pretrained(model)
    out = {}
    for name, w in built.items():
        seqs, decode = [], 0
        for kind, a in w["requests"]:
            if kind == "loglikelihood":
                seqs.append(tok(a[0] + a[1])["input_ids"])
            elif kind == "generate_until":
                seqs.append(tok(a[0])["input_ids"])
                decode += int(a[1].get("max_gen_toks", 256))
        full = sum(len(x) for x in seqs)
        out[name] = {
            "full": full + decode,
            "distinct": distinct_tokens(seqs) + decode,
            "decode": decode,
            "requests": len(w["requests"]),
        }
    return out


def projection(counts: dict[str, dict]) -> list[str]:
    """FLOPs = 2 x parameters x tokens (attention's share, under 3% at these lengths, left out); seconds at the
    stated sustained rate; decode steps bounded below by weight reads (one per step, batch-shared)."""
    lines = [
        "| workload | requests | tokens, full prefills | tokens, prefix-shared | FLOPs full | FLOPs shared | "
        "s at 400 TFLOP/s full | s shared | decode steps |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, c in counts.items():
        f_full, f_shared = 2 * PARAMS_8B * c["full"], 2 * PARAMS_8B * c["distinct"]
        lines.append(
            f"| {name} | {c['requests']} | {c['full']} | {c['distinct']} | {f_full:.2e} | {f_shared:.2e} | "
            f"{f_full / SUSTAINED_FLOP_S:.3f} | {f_shared / SUSTAINED_FLOP_S:.3f} | {c['decode']} |"
        )
    return lines


# ------------------------------------------------------------------ the sitting (the parent)


def run_arm(arm: str, args, passthrough: list[str]) -> dict:
    """One arm in a fresh interpreter; ``passthrough`` names the workloads file the parent wrote."""
    python = args.vllm_python if arm.startswith("vllm") else args.hf_python
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": str(args.threads),
    }
    if arm.startswith("vllm"):
        cores = {"VLLM_CPU_OMP_THREADS_BIND": f"0-{args.threads - 1}"}
        env.update({k: v for k, v in {**VLLM_ENV, **cores}.items() if k not in os.environ})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "arm.json"
        cmd = [python, "-m", "benchmarks", "engines", "--worker", arm, "--out", str(out), *passthrough]
        done = subprocess.run(cmd, env=env, cwd=str(ROOT), stdout=subprocess.DEVNULL)  # its stderr: progress
        if done.returncode != 0:
            raise SystemExit(f"arm {arm} failed (exit {done.returncode}); its messages are above")
        return json.loads(out.read_text())


def repeatability(arm_runs: list[dict], name: str) -> str:
    """How many of an arm's outputs of a workload are the same in every round as in its first ("" for one round)."""
    if len(arm_runs) < 2:
        return ""
    first = arm_runs[0]["workloads"][name]["outputs"]
    same = sum(all(r["workloads"][name]["outputs"][i] == out for r in arm_runs[1:]) for i, out in enumerate(first))
    return f"{same}/{len(first)}"


def agreement(name: str, w: dict, a: dict, b: dict) -> str:
    """How two arms' outputs of a workload compare."""
    oa, ob = a["outputs"], b["outputs"]
    scored = [i for i, (kind, _) in enumerate(w["requests"]) if kind == "loglikelihood"]
    parts = []
    if scored:
        gaps = [abs(oa[i][0] - ob[i][0]) for i in scored]
        parts.append(f"max |dLL| {max(gaps):.1e}")
        if w["groups"]:
            parts.append(f"argmax equal {measure.predictions(oa, w['groups']) == measure.predictions(ob, w['groups'])}")
    greedy = [i for i, (kind, r) in enumerate(w["requests"]) if kind == "generate_until" and not r[1].get("do_sample")]
    if greedy:
        parts.append(f"greedy texts equal {sum(oa[i] == ob[i] for i in greedy)}/{len(greedy)}")
    return ", ".join(parts)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    workloads.add_size_arguments(ap, SIZES, QUICK)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--rounds", type=int, default=1, help="each arm this many times, in rotating order")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hf_python", default=sys.executable)
    ap.add_argument("--vllm_python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--model", help="model folder (default: the bundled model)")
    ap.add_argument("--device", default="cpu", help="torch device of the hf arms, e.g. cuda")
    ap.add_argument("--dtype", default="float32", help="model dtype (all arms), e.g. bfloat16")
    ap.add_argument(
        "--softmax_dtype",
        help="lm-eval's softmax_dtype for the hf arms (float32 keeps bfloat16 runs' "
        "log-probabilities from being rounded to bfloat16)",
    )
    ap.add_argument("--hf_batch_size", default="16", help="stock hf's batch size (an int or auto)")
    ap.add_argument("--max_batch_tokens", type=int, default=4096, help="hf-shared's token budget per forward")
    ap.add_argument(
        "--min_shared_tokens",
        default="auto",
        help="hf-shared's worth of one more forward in tokens (auto: its device's default; 1028 is the bundled "
        "model's on an accelerator, to count that plan on a CPU)",
    )
    ap.add_argument("--requests", help="read the workloads from this file (written by --save_requests)")
    ap.add_argument("--save_requests", help="write the workloads to this file and stop (needs no model)")
    ap.add_argument(
        "--projection",
        action="store_true",
        help="print the workloads' token counts and the 8B-on-a-GPU projection, and stop (the tokenizer only)",
    )
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument(
        "--count",
        action="store_true",
        help="also count, per workload and hf arm, forwards, host reads of "
        "device results and host time between forwards (benchmarks/counting.py)",
    )
    ap.add_argument("--worker", choices=ARMS, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    workloads.sizes_of(args)
    if args.model is None:
        args.model = workloads.model_path()
    if args.hf_batch_size != "auto":
        args.hf_batch_size = int(args.hf_batch_size)
    if not args.worker and args.count and not set(args.arms.split(",")) <= {"hf", "hf-shared"}:
        ap.error("--count instruments torch in the arm's own process: hf and hf-shared arms only")
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.worker:
        return worker(args)
    built = build_workloads(args)
    if args.save_requests:
        Path(args.save_requests).write_text(json.dumps(built))
        print(
            f"{sum(len(w['requests']) for w in built.values())} requests of {len(built)} workloads written to "
            f"{args.save_requests}",
            file=sys.stderr,
        )
        return
    if args.projection:
        print_projection(token_counts(built, args.model))
        return
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs, load = sitting(args, built)
    rows, startup = tabulate(args, built, runs)
    print(
        f"\n{started}; machine: {measure.machine()}, {args.threads} threads per arm; "
        f"model {args.model}, {args.dtype} on {args.device}; "
        f"load average (1 min) before/between arms: {', '.join(f'{x:.1f}' for x in load)}; medians of "
        f"{args.rounds} round(s), arms in rotating order"
    )
    print_tables(rows, startup, base_arm(args.arms.split(",")))
    if args.count:
        print_counts(built, runs)
    counts = token_counts(built, args.model)
    print_projection(counts)
    cached = cache_tables(built, runs)
    if args.json:
        work = {
            arm: [{name: x["workloads"][name].get("counts") for name in built} for x in arm_runs]
            for arm, arm_runs in runs.items()
        }
        Path(args.json).write_text(
            json.dumps(
                {
                    "started": started,
                    "load": load,
                    "startup": startup,
                    "rows": rows,
                    "tokens": counts,
                    "work": work if args.count else None,
                    "vllm_shared_cache": dict(cached),
                    "args": {k: v for k, v in vars(args).items() if k != "sizes"},
                },
                indent=1,
            )
        )


def sitting(args, built: dict) -> tuple[dict[str, list[dict]], list[float]]:
    """Every arm for ``--rounds`` rounds in rotating order, each in a fresh interpreter reading the same requests
    (a file this parent writes); per arm its rounds' results, and the load before and between arms."""
    handed = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)  # every arm reads the same requests
    handed.write(json.dumps(built))
    handed.close()
    passthrough = [
        f"--{k}={getattr(args, k)}"
        for k in (
            "workloads",
            "threads",
            "model",
            "device",
            "dtype",
            "hf_batch_size",
            "max_batch_tokens",
            "min_shared_tokens",
            "softmax_dtype",
        )
        if getattr(args, k) is not None
    ] + (["--count"] if args.count else [])
    passthrough.append(f"--requests={handed.name}")
    arms = args.arms.split(",")
    load = [measure.load()]
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    try:
        for r, arm in measure.rotations(arms, args.rounds):  # a load change hits all arms
            print(f"round {r + 1}: {arm}", file=sys.stderr, flush=True)
            runs[arm].append(run_arm(arm, args, passthrough))
            load.append(measure.load())
    finally:
        os.unlink(handed.name)
    return runs, load


def base_arm(arms: list[str]) -> str:
    """The arm the others are compared with: lm-eval's ``vllm`` where it runs, else the first."""
    return "vllm" if "vllm" in arms else arms[0]


def tabulate(args, built: dict, runs: dict[str, list[dict]]) -> tuple[list[dict], dict]:
    """One row per workload and arm (medians over the rounds, ratios to the base arm), and the start-ups."""
    arms = args.arms.split(",")
    base = base_arm(arms)

    def med(arm, key, name=None):
        vals = [(x["workloads"][name] if name else x)[key] for x in runs[arm]]
        return statistics.median(vals)

    rows = []
    for name, w in built.items():
        for arm in arms:
            wall = med(arm, "wall_s", name)
            rps = w and len(w["requests"]) / wall
            ratio = med(base, "wall_s", name) / wall
            cpu = med(arm, "cpu_s", name)
            rows.append(
                {
                    "workload": w["title"],
                    "arm": arm,
                    "requests": len(w["requests"]),
                    "wall_s": round(wall, 2),
                    "cpu_s": round(cpu, 1),
                    f"cpu_throughput_over_{base}": round(med(base, "cpu_s", name) / cpu, 2),
                    "requests_per_s": round(rps, 2),
                    "peak_mb": round(med(arm, "peak_mb", name)),
                    f"throughput_over_{base}": round(ratio, 2),
                    "runs_wall_s": [round(x["workloads"][name]["wall_s"], 2) for x in runs[arm]],
                    "gpu_peak_mb": runs[arm][-1]["workloads"][name].get("gpu_peak_mb"),
                    "same_outputs_every_round": repeatability(runs[arm], name),
                    "outputs_vs_" + base: agreement(
                        name, w, runs[arm][-1]["workloads"][name], runs[base][-1]["workloads"][name]
                    )
                    if arm != base
                    else "",
                }
            )
    startup = {
        arm: {
            "startup_s": round(med(arm, "startup_s"), 1),
            "startup_peak_mb": round(med(arm, "startup_peak_mb")),
            "startup_gpu_peak_mb": runs[arm][-1].get("startup_gpu_peak_mb"),
            "runs_s": [round(x["startup_s"], 1) for x in runs[arm]],
        }
        for arm in arms
    }
    return rows, startup


def print_tables(rows: list[dict], startup: dict, base: str) -> None:
    print("\n| arm | start-up s | peak MB after start-up |\n| --- | --- | --- |")
    for arm, s in startup.items():
        print(f"| {arm} | {s['startup_s']} | {s['startup_peak_mb']} |")
    print(
        f"\n| workload | arm | requests | wall s | requests/s | throughput / {base} (wall) | CPU-s | "
        f"throughput / {base} (CPU) | peak MB | GPU peak MB | outputs vs {base} | same every round |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        gpu_mb = "" if r["gpu_peak_mb"] is None else round(r["gpu_peak_mb"])
        print(
            f"| {r['workload']} | {r['arm']} | {r['requests']} | {r['wall_s']} | {r['requests_per_s']} | "
            f"{r[f'throughput_over_{base}']}x | {r['cpu_s']} | {r[f'cpu_throughput_over_{base}']}x | {r['peak_mb']} | "
            f"{gpu_mb} | {r['outputs_vs_' + base]} | {r['same_outputs_every_round']} |"
        )


def print_projection(counts: dict[str, dict]) -> None:
    print(
        f"\nProjection (arithmetic, not a measurement): an 8B model ({PARAMS_8B:.2e} parameters, bf16) on one "
        f"GPU at a sustained {SUSTAINED_FLOP_S / 1e12:.0f} TFLOP/s; tokens counted with the bundled model's tokenizer"
    )
    print("\n".join(projection(counts)))


def cache_tables(built: dict, runs: dict[str, list[dict]]) -> list[tuple[str, dict]]:
    """vllm-shared's prefix-cache counts per workload (last round), printed as a table; returned for the JSON."""
    cached = [
        (name, runs["vllm-shared"][-1]["workloads"][name]["cache_counts"])
        for name in built
        if "vllm-shared" in runs and runs["vllm-shared"][-1]["workloads"][name]["cache_counts"]["requests"]
    ]
    if not cached:
        return cached
    print(
        "\nvllm-shared's prefix cache (last round): tokens the engine computed against the tokens lm-eval's vllm "
        "prefills and the distinct tokens (the floor); the same passes' arithmetic at 16-token blocks (a GPU's)"
    )
    print(
        "| workload | requests | prompt tokens | computed | distinct | computed / distinct | cache reads "
        "| recomputed | first rows (first-token requests) | block | simulated at that block: computed, recomputed "
        "| simulated at 16: computed, recomputed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, c in cached:
        own, s16 = c[f"simulated_{c['block_size']}"], c["simulated_16"]
        print(
            f"| {name} | {c['requests']} | {c['prompt_tokens']} | {c['computed_tokens']} | "
            f"{c['distinct_tokens']} | "
            f"{c['computed_tokens'] / c['distinct_tokens']:.2f} | {c['cache_reads']} | {c['recomputed']} | "
            f"{c['first_rows']} ({c['first_token_requests']}) | "
            f"{c['block_size']} | {own['computed_tokens']}, {own['recomputed']} | "
            f"{s16['computed_tokens']}, {s16['recomputed']} |"
        )
    return cached


def print_counts(built: dict, runs: dict[str, list[dict]]) -> None:
    """``--count``: per workload and arm, what it asks of the device (the last round; the counts do not change
    between rounds, the host times are under whatever load the round met)."""
    from benchmarks.counting import summary

    print(
        "\nWork per request (--count; benchmarks/counting.py): forwards, host reads of device results, kernel "
        "operations per forward, host time outside forwards"
    )
    print(
        "\n| workload | arm | requests | forwards | forwards / request | host reads / scored request | "
        "host reads / generated token | generated tokens | kernel ops / forward | host ms / forward | host s | "
        "forward s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, w in built.items():
        for arm, arm_runs in runs.items():
            c = summary(arm_runs[-1]["workloads"][name]["counts"])
            cells = [
                w["title"],
                arm,
                c["requests"],
                c["forwards"],
                c["forwards_per_request"],
                c["reads_per_scored_request"],
                c["reads_per_generated_token"],
                c["generated_tokens"],
                c["kernel_ops_per_forward"],
                c["host_ms_per_forward"],
                c["host_s"],
                c["forward_s"],
            ]
            print("| " + " | ".join("" if x is None else str(x) for x in cells) + " |")
    for name in built:
        for arm, arm_runs in runs.items():
            for kind, c in arm_runs[-1]["workloads"][name]["counts"].items():
                sites = ", ".join(f"{n} x {site}" for site, n in list(c["read_sites"].items())[:6])
                print(f"{name} / {arm} / {kind}: {c['host_reads']} host reads: {sites}")
