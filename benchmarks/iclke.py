"""What one IC-LKE / EIC-LKE test fact costs on the stock ``hf`` backend and on ``hf-shared``.

Builds the real requests of a few test facts (BEAR-big rows from ``--bear_big_path``, else the
bundled sample), counts tokens, times both backends on the bundled model and extrapolates to a
full T-REx-MC run (20,000 test facts, 100 options, n = 50).

    python -m benchmarks iclke [--facts 3] [--method iclke|eiclke] [--backends hf,hf-shared] [--bear_big_path DIR]

Prints one JSON object. Wall time on a shared machine is noisy: CPU seconds are printed too.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import measure, workloads

TREX_MC_TEST_FACTS = 20_000


def requests_for(docs, method: str) -> list[tuple[str, str]]:
    from belief_tasks.prompts.iclke import TARGET_DELIMITER
    from belief_tasks.tasks import iclke as iclke_task

    out = []
    for d in docs:
        for k, option in enumerate(d["options"]):
            ctx = iclke_task.eic_context(d, k) if method == "eiclke" else d["context"]
            out.append((ctx, TARGET_DELIMITER + option))
    return out


def token_counts(tok, reqs: list[tuple[str, str]]) -> dict:
    """Tokens a stock backend encodes (every request in full) vs a prefix tree (each distinct prefix once)."""
    from belief_tasks.backends.prefix_tree import distinct_tokens

    seqs = [tok(c + x)["input_ids"] for c, x in reqs]
    return {"stock_tokens": sum(len(s) for s in seqs), "prefix_tree_tokens": distinct_tokens(seqs)}


def time_backend(name: str, model_path: str, reqs, batch_size: int) -> dict:
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval.api.instance import Instance
    from lm_eval.api.registry import get_model

    lm = get_model(name).create_from_arg_string(
        f"pretrained={model_path},device=cpu,dtype=float32", {"batch_size": batch_size}
    )
    inst = [Instance("loglikelihood", {}, r, i, metadata=("bench", i, 1)) for i, r in enumerate(reqs)]
    out, wall, cpu = measure.clocked(lm.loglikelihood, inst)
    return {"wall_s": wall, "cpu_s": cpu, "logprobs": measure.loglikelihoods(out)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--facts", type=int, default=3)
    ap.add_argument("--method", default="iclke", choices=["iclke", "eiclke"])
    ap.add_argument("--backends", default="hf,hf-shared")
    ap.add_argument("--batch_size", type=int, default=8)
    ap.add_argument("--relation", default="P36")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--bear_big_path", type=Path, help="a local BEAR-big copy (default: the bundled sample)")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoTokenizer

    from belief_tasks.data import load_facts
    from belief_tasks.options import parse_options
    from belief_tasks.tasks import iclke as iclke_task

    torch.set_num_threads(args.threads)
    bear = args.bear_big_path
    md = {"bear_big_path": str(bear)} if bear else {"source": "sample"}
    md.update(relations=args.relation)
    build = iclke_task.eiclke_docs if args.method == "eiclke" else iclke_task.iclke_docs
    docs = build(load_facts("bear_big", md), parse_options(iclke_task.OPTIONS, md))[: args.facts]
    docs = [
        {**d, "examples": json.dumps(d["examples"]), "prior": json.dumps(d["prior"])} if args.method == "eiclke" else d
        for d in docs
    ]
    reqs = requests_for(docs, args.method)
    model = workloads.model_path()
    tok = AutoTokenizer.from_pretrained(model)
    counts = token_counts(tok, reqs)
    n = len(docs)
    report = {
        "data": "BEAR-big" if bear else "sample",
        "relation": args.relation,
        "method": args.method,
        "facts": n,
        "requests": len(reqs),
        "options_per_fact": len(reqs) / n,
        "context_tokens_mean": sum(len(tok(c)["input_ids"]) for c, _ in reqs) / len(reqs),
        "stock_tokens_per_fact": counts["stock_tokens"] / n,
        "prefix_tree_tokens_per_fact": counts["prefix_tree_tokens"] / n,
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": measure.load(),
    }
    results = {}
    for name in [b for b in args.backends.split(",") if b]:
        r = time_backend(name, model, reqs, args.batch_size)
        results[name] = r
        report[name] = {
            "wall_s_per_fact": r["wall_s"] / n,
            "cpu_s_per_fact": r["cpu_s"] / n,
            "full_trex_mc_hours_wall": r["wall_s"] / n * TREX_MC_TEST_FACTS / 3600,
        }
    if len(results) == 2:
        a, b = (results[k]["logprobs"] for k in results)
        report["max_abs_logprob_diff"] = max(measure.gaps(a, b))
    print(json.dumps(report, indent=1))
