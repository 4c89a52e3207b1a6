"""Coverage of the agreement section's κ interval, measured by simulation (docs/report.md).

The report gives Cohen's κ between two probes with a percentile bootstrap interval over the joined
facts (``metrics.agreement.kappa_interval``, 1,000 resamples, nominal 95 %). A nominal level is a claim
only where its coverage was measured: this script draws ``--draws`` samples of n facts from a known joint
distribution of (probe A knows, probe B knows), computes the interval of each exactly as the report does,
and counts how often it holds the population κ. Samples whose κ is undefined (one probe constant) have
no interval; they are counted apart, as the report shows "–" for them.

    python -m research.kappa_interval_coverage                          # the built-in settings
    python -m research.kappa_interval_coverage --n 40 --cell 0.1,0.1,0.05,0.75 --draws 2000

A setting is ``--n`` joined facts and ``--cell``: the shares of facts known by both, by A only, by B
only, by neither (they must add up to 1).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from belief_tasks.metrics.agreement import cohen_kappa, kappa_interval  # noqa: E402
from belief_tasks.report.agreement import BOOTSTRAP_ITERS  # noqa: E402

#: (n, both, A only, B only, neither): the three pairs of the real-data agreement page (docs/report.md,
#: "Agreement on the real datasets", their measured shares taken as the population), the main job's
#: BEAR / MONITOR pair (24 facts), and rarer knowledge at two sizes for contrast
SETTINGS = [
    (156, 0.333, 0.141, 0.205, 0.321),
    (38, 0.211, 0.105, 0.474, 0.210),
    (58, 0.172, 0.172, 0.534, 0.122),
    (24, 0.333, 0.167, 0.208, 0.292),
    (40, 0.05, 0.10, 0.10, 0.75),
    (400, 0.05, 0.10, 0.10, 0.75),
]


def population_kappa(cell: tuple[float, float, float, float]) -> float:
    """κ of the joint distribution itself: p_o = both + neither, p_e from the margins."""
    both, only_a, only_b, neither = cell
    pa, pb = both + only_a, both + only_b
    p_e = pa * pb + (1 - pa) * (1 - pb)
    return (both + neither - p_e) / (1 - p_e)


def coverage(n: int, cell: tuple[float, float, float, float], draws: int, seed: int, level: float) -> dict:
    """Share of ``draws`` samples of n facts whose interval holds the population κ (undefined ones apart)."""
    rng = np.random.default_rng(seed)
    truth = population_kappa(cell)
    codes = rng.choice(4, size=(draws, n), p=np.asarray(cell) / sum(cell))  # 0 both, 1 A only, 2 B only, 3 neither
    held, defined, widths = 0, 0, []
    for i, row in enumerate(codes):
        a, b = np.isin(row, (0, 1)), np.isin(row, (0, 2))
        if np.isnan(cohen_kappa(a, b)):
            continue
        lo, hi = kappa_interval(a, b, iters=BOOTSTRAP_ITERS, level=level, seed=i)
        defined += 1
        held += lo <= truth <= hi
        widths.append(hi - lo)
    return {
        "n": n,
        "cell": cell,
        "kappa": truth,
        "defined": defined,
        "coverage": held / defined if defined else np.nan,
        "mc_se": np.sqrt(held / defined * (1 - held / defined) / defined) if defined else np.nan,
        "width": float(np.mean(widths)) if widths else np.nan,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, help="joined facts (with --cell; default: the built-in settings)")
    p.add_argument("--cell", help="shares known by both, A only, B only, neither, comma-separated")
    p.add_argument("--draws", type=int, default=1000, help="simulated samples per setting (default 1000)")
    p.add_argument("--level", type=float, default=0.95)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if (args.n is None) != (args.cell is None):
        p.error("give --n and --cell together")
    settings = [(args.n, *map(float, args.cell.split(",")))] if args.n else SETTINGS
    print(
        f"nominal {args.level:.0%} percentile bootstrap of κ ({BOOTSTRAP_ITERS} resamples), "
        f"{args.draws} samples per setting"
    )
    print("| n | both, A only, B only, neither | κ | κ defined | coverage ± MC se | mean width |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n, *cell in settings:
        if not np.isclose(sum(cell), 1.0) or len(cell) != 4:
            p.error(f"--cell {cell}: four shares adding up to 1 expected")
        r = coverage(n, tuple(cell), args.draws, args.seed, args.level)
        print(
            f"| {n} | {', '.join(f'{c:.2f}' for c in cell)} | {r['kappa']:.3f} | {r['defined']} of {args.draws} | "
            f"{r['coverage']:.3f} ± {r['mc_se']:.3f} | {r['width']:.3f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
