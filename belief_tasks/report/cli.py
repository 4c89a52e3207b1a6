"""``belief-report OUTPUT_DIR [OUTPUT_DIR ...] --out REPORT_DIR``.

OUTPUT_DIR: what ``lm_eval`` / ``belief-eval`` was given as ``--output_path`` (it may
hold several model folders), one model folder inside it, or a results JSON. Run
the evaluation with ``--log_samples``: the report recomputes every number from
the per-sample records. Works offline.
"""

from __future__ import annotations

import argparse
import logging
import sys

from belief_tasks.report.loading import ReportInputError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="belief-report",
        description="Tables (Markdown + CSV), figures (PNG) and a knowledge card per model from lm-eval output "
        "folders of belief_* tasks (run with --output_path and --log_samples).",
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="OUTPUT_DIR",
        help="an lm-eval --output_path folder (one or several model subfolders), a model folder, or a results_*.json",
    )
    p.add_argument(
        "--out", "-o", required=True, metavar="REPORT_DIR", help="folder for report.md, tables/, figures/, cards/"
    )
    p.add_argument("--title", default="Knowledge report", help="the report's heading")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when a recomputed number differs from the harness's results JSON, "
        "or when a task's samples file is missing or belongs to another run",
    )
    p.add_argument(
        "--no-pool",
        action="store_true",
        help="report every folder as its own run; by default runs split by relation (the relations knob: "
        "same command, disjoint relations) are pooled into one run (docs/scale.md)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="print only the report's path")
    p.add_argument(
        "--x",
        metavar="REGEX",
        default=None,
        help="training curves: a regular expression whose first group, searched in each run's model "
        "arguments, is its checkpoint (default: revision=stepN or a step in the model folder's name)",
    )
    p.add_argument(
        "--split",
        metavar="FILE",
        default=None,
        help="training curves per side of a fact split (the facts_split.json a continued training wrote: "
        "trained and held-out facts; docs/training.md)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from belief_tasks.report import build_report

    try:
        split = None
        if args.split:
            from belief_tasks.facts.split import FactSplit

            try:
                split = FactSplit.load(args.split)
            except (OSError, ValueError) as e:
                raise ReportInputError(f"--split {args.split}: {e}") from e
        report = build_report(
            args.inputs, args.out, title=args.title, x_pattern=args.x, split=split, pool=not args.no_pool
        )
    except ReportInputError as e:
        print(f"belief-report: {e}", file=sys.stderr)
        return 2
    print(report.path if args.quiet else "\n".join(report.summary))
    if report.mismatched:
        print(
            f"belief-report: warning: {len(report.mismatched)} recomputed number(s) differ from the results JSON "
            "(were the tasks' code or settings changed since the run?)",
            file=sys.stderr,
        )
    unchecked = [
        f"{run.name} / {t.name}: {t.samples_missing}"
        for run in report.runs
        for t in run.tasks.values()
        if t.samples_path is None
    ]
    if unchecked and args.strict:
        print(
            f"belief-report: --strict: {len(unchecked)} task(s) could not be recomputed, so their numbers are "
            f"unchecked: {'; '.join(unchecked)}. Run them with --log_samples and keep each run's samples files "
            "beside its results JSON.",
            file=sys.stderr,
        )
    elif unchecked:  # not silence: the numbers of these tasks are shown, but nothing recomputed them
        print(
            f"belief-report: warning: {len(unchecked)} task(s) without their samples file, so their numbers are "
            f"shown from the results JSON unchecked and their breakdowns are left out: {'; '.join(unchecked)}. "
            "Run them with --log_samples (--strict makes this an error).",
            file=sys.stderr,
        )
    return 1 if args.strict and (report.mismatched or unchecked) else 0


if __name__ == "__main__":
    sys.exit(main())
