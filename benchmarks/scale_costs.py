"""Per-fact costs of every task on the bundled model (docs/scale.md).

For each task and setting it builds the task's requests exactly as lm-eval does
(``build_all_requests``, no model) and counts, per fact:

* docs and prompts (a BELIEF-ICL doc is a pair: its prompts are its distinct generation
  contexts; elsewhere one doc is one prompt), requests by type, and model tokens: context + continuation for
  log-likelihoods (what a forward pass reads), context + ``max_gen_toks`` for a
  generation (an upper bound: generation stops at the first newline);
* with ``--run``, wall and CPU seconds per fact of a real run on the bundled model
  (``hf``, batch size ``--batch-size``).

Sweeps show how the cost grows: with facts (linear by construction: check the
``facts`` column), with demonstrations (IC-LKE ``n_examples``, BELIEF 4-shot vs
zero-shot), choices (BEAR's answer space, IC-LKE ``max_options``) and samples
(BELIEF ``confidence_samples``).

    python -m benchmarks scale_costs                 # counts only, seconds
    python -m benchmarks scale_costs --run --facts 2 # plus timings (minutes on 2 cores)
    python -m benchmarks scale_costs --json costs.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from benchmarks import measure, workloads

RELATION = "P36"
#: (task, label, metadata) settings; each is measured on the same facts of RELATION
SETTINGS = [
    ("belief_bear", "all statement templates x |answer space|", {}),
    ("belief_bear", "1 template", {"templates": "0"}),
    ("belief_mp_zeroshot", "greedy only", {"confidence_samples": 0}),
    ("belief_mp_zeroshot", "K=10 samples on 1 prompt per pair", {"confidence_samples": 10}),
    ("belief_mp_4template", "greedy only, 4 demonstrations", {"confidence_samples": 0}),
    ("belief_qa_zeroshot", "greedy only", {"confidence_samples": 0}),
    ("belief_iclke", "n_examples=10, 20 options", {"n_examples": 10, "max_options": 20}),
    ("belief_iclke", "n_examples=50, 20 options", {"n_examples": 50, "max_options": 20}),
    ("belief_iclke", "n_examples=50, 100 options", {"n_examples": 50, "max_options": 100}),
    ("belief_eiclke", "n_examples=50, 20 options", {"n_examples": 50, "max_options": 20}),
    ("belief_monitor_sample", "prefix route (stock hf)", {}),
]


def fact_key(doc: dict) -> str:
    if doc.get("fact_id") not in (None, ""):
        return str(doc["fact_id"])
    return str(doc.get("doc_id"))


def count(task_name: str, metadata: dict, tokenizer) -> dict:
    task = workloads.build_task(task_name, metadata)
    docs = list(task.eval_docs)
    facts = {fact_key(d) for d in docs}
    requests, tokens = Counter(), Counter()
    for inst in task.instances:
        n = inst.repeats
        requests[inst.request_type] += n
        args = inst.args
        if inst.request_type == "generate_until":
            gen = args[1] or {}
            t = len(tokenizer(args[0])["input_ids"]) + int(gen.get("max_gen_toks", 256))
        else:
            t = len(tokenizer("".join(str(a) for a in args[:2] if isinstance(a, str)))["input_ids"])
        tokens[inst.request_type] += n * t
    nf = max(len(facts), 1)
    # a BELIEF-ICL doc is a pair holding many prompts: count distinct generation contexts there
    contexts = {(i.doc_id, i.args[0]) for i in task.instances if i.request_type == "generate_until"}
    prompts = len(contexts) if task_name.startswith(("belief_mp", "belief_qa")) else len(docs)
    return {
        "task": task_name,
        "facts": len(facts),
        "docs": len(docs),
        "prompts": prompts,
        "docs_per_fact": len(docs) / nf,
        "prompts_per_fact": prompts / nf,
        "requests_per_fact": {k: v / nf for k, v in sorted(requests.items())},
        "tokens_per_fact": {k: v / nf for k, v in sorted(tokens.items())},
        "tokens_per_fact_total": sum(tokens.values()) / nf,
    }


def timed(task_name: str, metadata: dict, lm) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=metadata)
    _, wall, cpu = measure.clocked(
        simple_evaluate,
        model=lm,
        tasks=[task_name],
        task_manager=tm,
        metadata=metadata,
        log_samples=False,
        bootstrap_iters=0,
        verbosity="ERROR",
    )
    return {"wall_s": wall, "cpu_s": cpu}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, default=2, help="facts of the relation (max_facts_per_relation)")
    ap.add_argument("--run", action="store_true", help="also time a real run on the bundled model")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated task names")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from transformers import AutoTokenizer

    model = workloads.model_path()
    tokenizer = AutoTokenizer.from_pretrained(model)
    lm = None
    if args.run:
        import torch
        from lm_eval.models.huggingface import HFLM

        lm = HFLM(pretrained=model, device="cpu", dtype="float32", batch_size=args.batch_size)
        print(f"# torch threads {torch.get_num_threads()}, {measure.machine()}", flush=True)
    only = {t for t in args.only.split(",") if t}
    rows = []
    for task, label, extra in SETTINGS:
        if only and task not in only:
            continue
        md = {
            "source": "sample",
            "relations": RELATION,
            "max_facts_per_relation": args.facts,
            "pretrained": model,
            **extra,
        }
        row = {"setting": label, **count(task, md, tokenizer)}
        if lm is not None:
            t = timed(task, md, lm)
            row.update({k: v / row["facts"] for k, v in t.items()})
        rows.append(row)
        req = ", ".join(f"{v:g} {k}" for k, v in row["requests_per_fact"].items())
        timing = f" | {row['wall_s']:.2f} s wall, {row['cpu_s']:.2f} s CPU" if lm is not None else ""
        print(
            f"| {task} | {label} | {row['docs_per_fact']:g} ({row['prompts_per_fact']:g}) | {req} "
            f"| {row['tokens_per_fact_total']:,.0f}{timing} |",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps({"model": Path(model).name, "relation": RELATION, "rows": rows}, indent=1))
