"""Coverage of the budgeted runs' 95 % intervals, measured by simulation (docs/budget.md).

Takes a full run's logged records (``--records OUTPUT_DIR``: every task of ours below it with a
``--log_samples`` file) or a synthetic population (``--synthetic myriadlama|bear``), draws ``--draws``
budgeted samples per budget with the project's own sampler and intervals, and prints per budget and
metric: the coverage of the full-data value, the mean interval half-width, the bias, the spread of the
estimates (SD) against the mean standard error, and the facts drawn. ``--csv`` / ``--markdown`` write
the table.

    python scripts/budget_coverage.py --synthetic myriadlama --draws 1000
    python scripts/budget_coverage.py --records results/full_run --draws 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's belief_tasks, as other scripts do

from belief_tasks.families import budget_estimators  # noqa: E402
from belief_tasks.scoring import budgeted  # noqa: E402
from belief_tasks.scoring.common import records_behind  # noqa: E402
from research import budget_coverage  # noqa: E402

#: coverage a 95 % interval should reach over the draws (the must-hold band of docs/budget.md)
BAND = (0.93, 0.97)


def populations(args) -> list[budget_coverage.Population]:
    if args.synthetic:
        return [budget_coverage.SYNTHETIC[args.synthetic](args.scale, args.seed)]
    from belief_tasks.report.loading import load_runs

    found: dict[str, list] = {}  # population name -> (family, records)
    for run in load_runs(args.records):
        for name, task in sorted(run.tasks.items()):
            if not task.has_records or budget_estimators(task.family) is None or (args.task and name not in args.task):
                continue
            records = records_behind(task.records())
            if budgeted.is_budgeted(records):
                print(f"{run.name} {name}: a budgeted run; the study needs a full run's records", file=sys.stderr)
                continue
            key = f"{run.model_name.rstrip('/').split('/')[-1]}: {name}" if args.pool else f"{run.name}: {name}"
            found.setdefault(key, [task.family, []])[1].extend(records)
    if not found:
        raise SystemExit(f"no full run of a task with budgeted statistics below {args.records}")
    out = []
    for key, (family, records) in found.items():
        est = budget_estimators(family)
        units = est.units(records)
        out.append(
            budget_coverage.Population(
                key,
                family,
                units,
                est.statistics,
                est.not_estimable,
                f"{len(units.ids):,} facts, {len(set(units.relations))} relations",
            )
        )
    return out


def table(pop: budget_coverage.Population, args) -> pd.DataFrame:
    start = time.time()
    if args.metrics:
        unknown = sorted(set(args.metrics) - set(pop.statistics))
        if unknown:
            raise SystemExit(f"{pop.name}: no budgeted statistic named {', '.join(unknown)}")
        pop.statistics = {m: g for m, g in pop.statistics.items() if m in args.metrics}
    rows = budget_coverage.simulate(pop, args.budgets, args.draws, args.method, args.first_seed, args.reps)
    out = budget_coverage.summarise(pop, rows)
    out.insert(0, "population", pop.name)
    out["within_band"] = out["coverage"].between(*BAND)
    print(
        f"{pop.name} ({pop.note}): {args.draws} draws x {len(args.budgets)} budgets, {args.method}, "
        f"{time.time() - start:.0f} s",
        file=sys.stderr,
    )
    if pop.not_estimable:
        print(f"  not estimable from a sample (NaN in a budgeted run): {', '.join(pop.not_estimable)}", file=sys.stderr)
    return out


def covers_from(rows: pd.DataFrame) -> str:
    """The smallest budget from which the coverage is at least the band's lower end at every larger budget."""
    ok = [
        (b, c >= BAND[0] or (sd == 0 and hw == 0))
        for b, c, sd, hw in zip(rows["budget"], rows["coverage"], rows["sd"], rows["half_width"])
    ]
    ok.sort()
    start = None
    for b, good in ok:
        start = (start if start is not None else b) if good else None
    return "-" if start is None else f"{start:.0%}"


def markdown(df: pd.DataFrame) -> str:
    """One row per metric; per budget: coverage / mean half-width / bias (a metric that is the same on every
    draw, e.g. always 0, is marked "constant": its zero-width interval covers trivially)."""
    budgets = list(dict.fromkeys(df["budget"]))
    facts = {b: df.loc[df["budget"] == b, "facts"].iloc[0] for b in budgets}
    head = (
        ["metric", "full-data value"]
        + [f"{b:.0%} ({facts[b]:,.0f} facts): coverage / half-width / bias" for b in budgets]
        + ["covers from"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for metric, rows in df.groupby("metric", sort=False):
        cells = [f"`{metric}`", f"{rows['full_value'].iloc[0]:.4f}"]
        for b in budgets:
            r = rows[rows["budget"] == b].iloc[0]
            mark = "" if r["within_band"] else " *"
            cells.append(
                "constant"
                if r["sd"] == 0 and r["half_width"] == 0
                else f"{r['coverage']:.3f}{mark} / {r['half_width']:.4f} / {r['bias']:+.4f}"
            )
        cells.append(covers_from(rows))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--records", nargs="+", help="output folders of full runs (with --log_samples)")
    src.add_argument(
        "--synthetic", choices=sorted(budget_coverage.SYNTHETIC), help="a synthetic population in this layout"
    )
    ap.add_argument("--task", nargs="*", help="only these tasks of the records")
    ap.add_argument(
        "--pool",
        action="store_true",
        help="one population per model and task from several runs (e.g. runs of disjoint relations)",
    )
    ap.add_argument("--scale", type=float, default=1.0, help="synthetic size relative to the real dataset")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic population")
    ap.add_argument("--budgets", type=lambda s: tuple(float(x) for x in s.split(",")), default=budget_coverage.BUDGETS)
    ap.add_argument("--draws", type=int, default=1000, help="budgeted samples per budget")
    ap.add_argument("--first-seed", type=int, default=0, help="sampler seed of the first draw (then +1 each)")
    ap.add_argument("--method", choices=("bootstrap", "jackknife"), default=budgeted.METHOD)
    ap.add_argument("--reps", type=int, default=budgeted.REPS, help="bootstrap replicates per interval")
    ap.add_argument("--metrics", type=lambda s: s.split(","), help="only these metrics (comma-separated)")
    ap.add_argument("--csv", type=Path, help="write the table as CSV")
    ap.add_argument("--markdown", type=Path, help="write the table as Markdown")
    args = ap.parse_args(argv)
    df = pd.concat([table(pop, args) for pop in populations(args)], ignore_index=True)
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(df.round(4).to_string(index=False))
    if args.csv:
        df.to_csv(args.csv, index=False)
    if args.markdown:
        args.markdown.write_text(
            "\n\n".join(f"**{p}**\n\n" + markdown(g) for p, g in df.groupby("population", sort=False))
        )


if __name__ == "__main__":
    main()
