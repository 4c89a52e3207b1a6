"""Agreement between probes on the real datasets: BEAR, IC-LKE on BEAR-big and MONITOR on FKTC.

Runs the recipe of docs/report.md ("Agreement on the real datasets") on local copies of the data, then
``belief-report`` over its outputs, and checks the page: each pair of probes must have joined every fact
the two probes could join, as counted beforehand from the documents the tasks build (no model).

    python -m benchmarks agreement_real DATA_DIR --out results/real          # the runs, the report, the check
    python -m benchmarks agreement_real DATA_DIR --plan                      # only the count (no model)
    python -m benchmarks agreement_real DATA_DIR --out results/real --check  # the count against an existing report

DATA_DIR holds ``bear/BEAR``, ``bear/BEAR-big`` and ``fktc/FKTC`` in the layouts of docs/data.md. The
model is the bundled default unless ``--model_args`` says otherwise. Exit status 1 when a pair of the page
joined other counts than the plan.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from belief_tasks.facts.join import BY_FACT_ID, RULES, join_keys
from belief_tasks.facts.schema import FactKey
from belief_tasks.tasks.base import unpack
from benchmarks import measure, workloads
from benchmarks.workloads import ROOT

#: task -> its --metadata: the relations where the three datasets share most facts (docs/report.md says why)
RECIPE = {
    "belief_bear": {"relations": "P30,P1376"},
    "belief_iclke_bear": {"relations": "P30,P1376"},
    "belief_monitor": {"relations": "P1376"},
}


def task_keys(task: str, metadata: dict) -> dict[str, FactKey]:
    """Fact id -> key of every fact ``task`` evaluates with ``metadata``: its own documents, built as lm-eval does."""
    from belief_tasks.options import parse_options
    from belief_tasks.tasks import bear, iclke, monitor

    module, build = {
        "belief_bear": (bear, bear.bear_dataset),
        "belief_iclke_bear": (iclke, iclke.iclke_bear),
        "belief_monitor": (monitor, monitor.fktc_dataset),
    }[task]
    docs = build(parse_options(module.OPTIONS, metadata))["test"]
    return {d["fact_id"]: FactKey.from_record(unpack(d, "fact_key")) for d in docs}


def relation_keys(dataset: str, relations: str) -> dict[str, FactKey]:
    """Fact id -> key of every fact of ``relations`` in ``dataset`` (IC-LKE's training facts included)."""
    from belief_tasks.data import load_facts
    from belief_tasks.facts.schema import fact_key

    fs = load_facts(dataset)
    return {f.id: fact_key(f, fs.relations[f.relation]) for r in relations.split(",") for f in fs.facts_of(r)}


def plan(model_args: str) -> tuple[dict[str, int], dict[tuple[str, str], dict[str, int]]]:
    """Facts per task and, per pair of tasks, the facts they can join (by rule), conflicts and duplicates;
    ``whole``: what the pair would join if IC-LKE probed its training facts too (the seeded split's cost)."""
    pretrained = dict(kv.split("=", 1) for kv in model_args.split(","))["pretrained"]
    keys = {t: task_keys(t, {**md, "pretrained": pretrained}) for t, md in RECIPE.items()}
    whole = {**keys, "belief_iclke_bear": relation_keys("bear_big", RECIPE["belief_iclke_bear"]["relations"])}
    tasks = sorted(keys)
    pairs = {
        (a, b): {**join_keys(keys[a], keys[b]).counts(), "whole": join_keys(whole[a], whole[b]).counts()["joined"]}
        for i, a in enumerate(tasks)
        for b in tasks[i + 1 :]
    }
    return {t: len(k) for t, k in keys.items()}, pairs


def run(out: Path, model_args: str, extra: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for task, metadata in RECIPE.items():
        cmd = measure.belief_eval(
            "--model",
            "hf-shared",
            "--model_args",
            model_args,
            "--batch_size",
            "32",
            "--tasks",
            task,
            "--metadata",
            json.dumps(metadata),
            "--output_path",
            str(out),
            "--log_samples",
            *extra,
        )
        print("+ " + " ".join(cmd), flush=True)
        done = measure.run_child(cmd, measure.child_env(), out / f"{task}.log")
        if done["status"]:
            raise SystemExit(f"{task} failed ({done['status']}); its output: {out / f'{task}.log'}")
        print(
            f"{task}: {done['wall_s']:.0f} s wall, {done['cpu_s']:.0f} CPU-s, peak {done['peak_mb']:.0f} MiB, "
            f"load {done['load']:.1f}",
            flush=True,
        )
    report = [sys.executable, "-m", "belief_tasks.report.cli", str(out), "--out", str(out / "report")]
    subprocess.run(report, check=True, cwd=str(ROOT))


def check(out: Path, pairs: dict[tuple[str, str], dict[str, int]]) -> int:
    """Compare the page's per-pair counts (tables/agreement_pairs_*.csv) with the plan's."""
    tables = sorted((out / "report" / "tables").glob("agreement_pairs_*.csv"))
    if len(tables) != 1:
        print(f"expected one agreement_pairs table below {out / 'report'}, found {len(tables)}", file=sys.stderr)
        return 1
    with tables[0].open() as fh:
        page = {tuple(sorted((r["probe_a"], r["probe_b"]))): r for r in csv.DictReader(fh)}
    bad = 0
    for pair, want in pairs.items():
        got = page.get(pair)
        fields = ("joined", "conflicts", *[r for r in RULES if r != BY_FACT_ID])
        seen = {f: int(got["n" if f == "joined" else f]) for f in fields} if got else None
        ok = seen == {f: want[f] for f in fields}
        bad += not ok
        num = lambda field, got=got: float(got[field] or "nan")  # noqa: E731  (the CSV leaves an undefined κ empty)
        kappa = f"κ {num('kappa'):.2f} [{num('kappa_lo'):.2f}, {num('kappa_hi'):.2f}]" if got else ""
        print(
            f"{pair[0]} / {pair[1]}: plan {want['joined']} joined, page {seen['joined'] if seen else '-'} "
            f"({'ok' if ok else 'DIFFERS'}) {kappa}"
        )
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", type=Path, help="folder with bear/BEAR, bear/BEAR-big and fktc/FKTC")
    p.add_argument(
        "--out", type=Path, default=Path("results/real"), help="output path of the runs (default results/real)"
    )
    p.add_argument("--model_args", help="as for belief-eval (default: the bundled model, float32)")
    p.add_argument("--plan", action="store_true", help="only count the facts each pair can join; no model")
    p.add_argument("--check", action="store_true", help="no runs: check the report already under --out")
    args, extra = p.parse_known_args(argv)
    os.environ.update(workloads.real_data_env(args.data_dir))
    if args.model_args is None:
        args.model_args = f"pretrained={workloads.model_path()},dtype=float32"
    facts, pairs = plan(args.model_args)
    print("facts per task: " + ", ".join(f"{t} {n}" for t, n in facts.items()))
    for (a, b), c in pairs.items():
        rules = ", ".join(f"{r} {c[r]}" for r in RULES if c[r])
        print(
            f"{a} / {b}: {c['joined']} joinable ({rules}), {c['conflicts']} conflicts, {c['duplicates']} duplicates; "
            f"{c['whole']} with IC-LKE's training facts"
        )
    if args.plan:
        return 0
    if not args.check:
        run(args.out, args.model_args, extra)
    return check(args.out, pairs)
