"""Metrics that compare models (or settings) with each other: records of two runs in, a number out.

* ``subsumption_rate``: IC-LKE's η (Wu et al., section 4.2.2) and BELIEF's knowledge
  sharing rate (Zhao et al., v3 section 6.4, Figure 4) are the same asymmetric
  quantity, |A ∩ B| / |A|, over sets of known facts.
* ``mean_subsumption_rate``: η averaged over relations (IC-LKE Tables 1 and 10).
* ``correlation``: Pearson's r with its two-sided p-value (MONITOR Table 4 and
  Table 12: r(MONITOR, avg acc) across models).
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

import numpy as np


def subsumption_rate(known_a: Collection, known_b: Collection) -> float:
    """η(θ_a | θ_b, F) = |φ(θ_a, F) ∩ φ(θ_b, F)| / |φ(θ_a, F)| (IC-LKE section 4.2.2).

    The share of the facts known by ``a`` that ``b`` knows too. BELIEF v3 section 6.4
    calls the same ratio the knowledge sharing rate ("facts correctly predicted by
    the top-listed model relative to those captured by the left-listed model":
    ``a`` = left/row, ``b`` = top/column). NaN when ``a`` knows nothing.
    """
    a, b = set(known_a), set(known_b)
    if not a:
        return float("nan")
    return len(a & b) / len(a)


def mean_subsumption_rate(known_a: Mapping[str, Collection], known_b: Mapping[str, Collection]) -> float:
    """η averaged over relations (IC-LKE Tables 1, 10): per relation ``subsumption_rate``, then the mean
    over the relations where ``a`` knows at least one fact. NaN when there is none."""
    rates = [subsumption_rate(known_a[r], known_b.get(r, ())) for r in known_a if len(known_a[r])]
    return float(np.mean(rates)) if rates else float("nan")


def correlation(x: Sequence[float], y: Sequence[float]) -> tuple[float, float, int]:
    """Pearson r, its two-sided p-value and n, over the pairs where both values are finite.

    NaNs when fewer than 3 pairs remain (with 2 points r is always ±1) or a side is constant.
    """
    from scipy import stats

    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xa.shape != ya.shape:
        raise ValueError("x and y differ in length")
    ok = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[ok], ya[ok]
    n = int(xa.size)
    if n < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return float("nan"), float("nan"), n
    r, p = stats.pearsonr(xa, ya)
    return float(r), float(p), n
