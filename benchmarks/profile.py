"""The profile's cost and precision at several budgets, and the estimate against what was measured.

For each budget (and, with ``--demo``, for the main job first) it

1. runs ``python -m belief_tasks profile --estimate`` (the cost before the model loads: rates stored by the
   runs before it, or by ``--calibrate``, which times a few seconds of the smallest budget's requests first), and
   with ``--flop`` the same estimate from an empty rate file (the FLOP projection and the harness defaults);
2. runs the profile itself (``python -m belief_tasks profile --metadata '{"budget": B}'``), timing it end to
   end (wall, CPU, and the peak memory of the process: ``ru_maxrss`` of the child), with each phase's time
   (``BELIEF_PROGRESS_JSON``);
3. reads the results: every task's headline metric (``families.Family.headline``) with its 95 % interval
   and half-width, the facts each pair of probes shares and its κ interval (the report's pair table);

and writes one Markdown table of the runs, one of headline intervals and one of estimated against measured.

    python -m benchmarks profile DATA_DIR --budgets 0.01,0.05,0.2 --demo --calibrate --flop \\
        --out results/bench_profile --markdown profile.md

``DATA_DIR`` holds ``bear/BEAR``, ``bear/BEAR-big`` and ``fktc/FKTC`` (docs/data.md); MyriadLAMA is read from
``--myriadlama_path``, else from the bundled sample written in its layout (``scripts/sample_as_myriadlama.py``).
Rates go to ``OUT/rates.json`` (``BELIEF_RATES``), so the benchmark starts from no stored rate unless
``--rates`` names a file. Other arguments go to every profile command (``--model_args``, ``--batch_size``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from benchmarks import measure, workloads
from benchmarks.workloads import ROOT


def timed(cmd: list[str], env: dict, log: Path) -> dict:
    """Run ``cmd``; its wall and CPU seconds, peak RSS (GiB) and exit status; its output in ``log``."""
    run = measure.run_child(cmd, env, log)
    run["peak_gib"] = run.pop("peak_mb") / 2**10
    return run


def headlines(out: Path) -> list[dict]:
    """Per task of the newest results JSON below ``out``: its family's headline metric, value and 95 % interval."""
    from belief_tasks.families import FAMILIES

    results = sorted(out.rglob("results_*.json"))
    if not results:
        return []
    data = json.loads(results[-1].read_text())
    rows = []
    for task, res in sorted(data["results"].items()):
        family = (data["configs"].get(task, {}).get("metadata") or {}).get("family")
        if family not in FAMILIES:
            continue
        metric = FAMILIES[family].headline
        value, ci = res.get(f"{metric},none"), res.get(f"{metric}_ci95,none")
        design = data["configs"][task]["metadata"].get("budget_design") or {}
        half = (ci[1] - ci[0]) / 2 if isinstance(ci, list) and None not in ci else None
        rows.append(
            {
                "task": task,
                "metric": metric,
                "value": value,
                "ci95": ci,
                "half_width": half,
                "facts": design.get("facts_drawn"),
                "population": design.get("facts_in_population"),
            }
        )
    return rows


def pairs(out: Path) -> list[dict]:
    import csv

    tables = sorted((out / "report" / "tables").glob("agreement_pairs_*.csv"))
    if not tables:
        return []
    with tables[0].open(encoding="utf-8") as fh:
        return [
            {
                "a": r["probe_a"],
                "b": r["probe_b"],
                "facts": int(r["n"]),
                "kappa": [float(r[k]) if r[k] not in ("", "nan") else None for k in ("kappa", "kappa_lo", "kappa_hi")],
            }
            for r in csv.DictReader(fh)
        ]


def fmt_s(s: float | None) -> str:
    from belief_tasks.planning.progress import duration

    return duration(s) if s is not None else "-"


def one(label: str, command: list[str], extra: list[str], out: Path, env: dict, calibrate: bool, flop: bool) -> dict:
    """Estimate, then run, one command (``profile`` or ``demo``); its files are named after ``label``. ``flop``:
    also estimate it from no stored rate (the FLOP projection), beside the estimate from the rates stored so far."""
    py = [sys.executable, "-m", "belief_tasks"]
    name = label.replace(" ", "_").replace("%", "pct")
    est_json, prog_json = out / f"{name}.estimate.json", out / f"{name}.progress.json"
    est_cmd = (
        py + command + ["--estimate", *(["--calibrate"] if calibrate else []), "--estimate_json", str(est_json), *extra]
    )
    print("+ " + " ".join(est_cmd), flush=True)
    est_run = timed(est_cmd, env, out / f"{name}.estimate.log")
    estimate = json.loads(est_json.read_text()) if est_json.is_file() else {}
    flop_estimate = {}
    if flop:  # the same estimate from an empty rate file: the FLOP projection and the harness defaults
        flop_json, empty = out / f"{name}.flop.estimate.json", out / f"{name}.flop.rates.json"
        empty.unlink(missing_ok=True)
        flop_cmd = py + command + ["--estimate", "--estimate_json", str(flop_json), *extra]
        print("+ BELIEF_RATES=" + str(empty) + " " + " ".join(flop_cmd), flush=True)
        timed(flop_cmd, {**env, "BELIEF_RATES": str(empty)}, out / f"{name}.flop.estimate.log")
        flop_estimate = json.loads(flop_json.read_text()) if flop_json.is_file() else {}
    run_out = out / name
    run_cmd = py + command + ["--output_path", str(run_out), *extra]
    print("+ " + " ".join(run_cmd), flush=True)
    run = timed(run_cmd, {**env, "BELIEF_PROGRESS_JSON": str(prog_json)}, out / f"{name}.log")
    progress = json.loads(prog_json.read_text()) if prog_json.is_file() else {}
    phases = progress.get("measured", {})
    row = {
        "label": label,
        "estimate": estimate,
        "flop_estimate": flop_estimate,
        "cpu_phases": progress.get("cpu", {}),
        "planned": progress.get("planned", {}),
        "estimate_run": est_run,
        "run": run,
        "phases": phases,
        "headlines": headlines(run_out),
        "pairs": pairs(run_out),
    }
    print(
        f"{label}: estimated {fmt_s(estimate.get('total_s'))}, measured {fmt_s(run['wall_s'])} wall "
        f"(exit {run['status']}), peak {run['peak_gib']:.2f} GiB",
        flush=True,
    )
    return row


def ratio(measured: float | None, estimated: float | None) -> str:
    return f"{measured / estimated:.2f}" if measured and estimated else "-"


def markdown(rows: list[dict]) -> str:
    out = [
        "| run | facts (tasks) | wall | CPU | peak memory | load average |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        facts = ", ".join(
            f"{h['task'].removeprefix('belief_').removeprefix('profile_')} {h['facts'] or '-'}" for h in r["headlines"]
        )
        out.append(
            f"| {r['label']} | {facts} | {fmt_s(r['run']['wall_s'])} | {fmt_s(r['run']['cpu_s'])} | "
            f"{r['run']['peak_gib']:.2f} GiB | {r['run']['load']:.1f} |"
        )
    out += [
        "",
        "| run | task | headline | estimate | 95 % interval | half-width |",
        "| --- | --- | --- | ---: | --- | ---: |",
    ]
    for r in rows:
        for h in r["headlines"]:
            ci = f"[{h['ci95'][0]:.4f}, {h['ci95'][1]:.4f}]" if h["half_width"] is not None else "-"
            half = f"{h['half_width']:.4f}" if h["half_width"] is not None else "-"
            value = f"{h['value']:.4f}" if isinstance(h["value"], (int, float)) else str(h["value"])
            out.append(f"| {r['label']} | {h['task']} | {h['metric']} | {value} | {ci} | {half} |")
        for p in r["pairs"]:
            k = p["kappa"]
            ci = f"[{k[1]:.2f}, {k[2]:.2f}]" if None not in k else "-"
            half = f"{(k[2] - k[1]) / 2:.2f}" if None not in k else "-"
            out.append(
                f"| {r['label']} | {p['a']} / {p['b']} ({p['facts']} shared facts) | κ | "
                f"{k[0] if k[0] is None else format(k[0], '.2f')} | {ci} | {half} |"
            )
    out += [
        "",
        "| run | phase | estimated (stored rates) | FLOP projection | measured (CPU) | measured / estimated "
        "| measured / FLOP |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        est, flop = r["estimate"].get("phases", {}), (r.get("flop_estimate") or {}).get("phases", {})
        for phase, took in r["phases"].items():
            e, f, cpu = est.get(phase), flop.get(phase), r.get("cpu_phases", {}).get(phase)
            out.append(
                f"| {r['label']} | {phase} | {fmt_s(e)} | {fmt_s(f)} | {fmt_s(took)} ({fmt_s(cpu)}) | "
                f"{ratio(took, e)} | {ratio(took, f)} |"
            )
        total, flop_total = r["estimate"].get("total_s"), (r.get("flop_estimate") or {}).get("total_s")
        out.append(
            f"| {r['label']} | **total (wall)** | {fmt_s(total)} | {fmt_s(flop_total)} | {fmt_s(r['run']['wall_s'])} | "
            f"**{ratio(r['run']['wall_s'], total)}** | **{ratio(r['run']['wall_s'], flop_total)}** |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", type=Path, help="folder with bear/BEAR, bear/BEAR-big and fktc/FKTC")
    p.add_argument("--budgets", default="0.01,0.05,0.2")
    p.add_argument("--out", type=Path, default=Path("results/bench_profile"))
    p.add_argument("--myriadlama_path", help="a local MyriadLAMA copy (default: the bundled sample in its layout)")
    p.add_argument("--demo", action="store_true", help="the main job first (estimate, then run)")
    p.add_argument("--calibrate", action="store_true", help="the first estimate calibrates its rates on the model")
    p.add_argument("--flop", action="store_true", help="also estimate each run from no stored rate (FLOP projection)")
    p.add_argument("--rates", type=Path, help="the rate file (default: OUT/rates.json, started empty)")
    p.add_argument("--markdown", type=Path, help="write the tables here")
    p.add_argument(
        "--threads",
        type=int,
        default=os.cpu_count(),
        help="torch threads (OMP_NUM_THREADS) of each run: every core by default; 1 on a shared machine",
    )
    args, extra = p.parse_known_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = measure.child_env(args.threads)
    env.update(workloads.real_data_env(args.data_dir))
    if args.myriadlama_path:
        env["BELIEF_MYRIADLAMA_PATH"] = str(Path(args.myriadlama_path).resolve())
    else:
        import importlib.util

        path = ROOT / "scripts" / "sample_as_myriadlama.py"
        spec = importlib.util.spec_from_file_location("sample_as_myriadlama", path)
        script = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(script)
        env["BELIEF_MYRIADLAMA_PATH"] = str(script.write(out / "myriadlama").parent)
    rates = (args.rates or out / "rates.json").resolve()
    if args.rates is None and rates.exists():
        rates.unlink()  # a fresh start: every estimate below uses only what this benchmark measured before it
    env["BELIEF_RATES"] = str(rates)
    rows, calibrate = [], args.calibrate
    if args.demo:
        demo_env = {k: v for k, v in env.items() if not k.startswith("BELIEF_") or k == "BELIEF_RATES"}
        rows.append(one("demo", ["demo"], extra, out, demo_env, calibrate, args.flop))
        calibrate = False
    for b in [float(x) for x in args.budgets.split(",") if x]:
        label = f"profile {b:.0%}"
        command = ["profile", "--metadata", json.dumps({"budget": b})]
        rows.append(one(label, command, extra, out, env, calibrate, args.flop))
        calibrate = False
        (out / "bench.json").write_text(json.dumps(rows, indent=1, default=str))
    text = markdown(rows)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    return 0 if all(r["run"]["status"] == 0 for r in rows) else 1
