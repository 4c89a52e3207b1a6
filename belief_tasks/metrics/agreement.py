"""Agreement between two probes on which facts a model knows (beyond the papers).

Each probe gives, per fact, known (True) or not (False). On the facts both probes saw:

* ``cohen_kappa``: Cohen's κ = (p_o − p_e) / (1 − p_e), with p_o the share of facts on which the
  two probes agree and p_e = p_a·p_b + (1 − p_a)(1 − p_b) the agreement expected by chance from
  each probe's own share of known facts p_a, p_b (Cohen, 1960). NaN when p_e = 1 (both probes
  constant and equal: κ is undefined, although p_o = 1).
* ``agreement_table``: p_o and the shares of facts known by both, by one only, by neither.
* ``kappa_interval``: a percentile bootstrap interval of κ, resampling facts with replacement.

Pure: arrays in, numbers out.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _pair(a: Sequence[bool], b: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"two equally long 1-d sequences expected, got {x.shape} and {y.shape}")
    return x, y


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """κ = (p_o − p_e) / (1 − p_e) for two binary raters over the same facts (NaN if undefined)."""
    x, y = _pair(a, b)
    if x.size == 0:
        return float("nan")
    p_o = float(np.mean(x == y))
    pa, pb = float(x.mean()), float(y.mean())
    p_e = pa * pb + (1 - pa) * (1 - pb)
    if np.isclose(p_e, 1.0):
        return float("nan")
    return (p_o - p_e) / (1 - p_e)


def agreement_table(a: Sequence[bool], b: Sequence[bool]) -> dict[str, float]:
    """``agreement`` (p_o), ``both``, ``only_a``, ``only_b``, ``neither`` (shares of the facts) and ``n``."""
    x, y = _pair(a, b)
    n = x.size
    if n == 0:
        return {
            "agreement": float("nan"),
            "both": float("nan"),
            "only_a": float("nan"),
            "only_b": float("nan"),
            "neither": float("nan"),
            "n": 0,
        }
    return {
        "agreement": float(np.mean(x == y)),
        "both": float(np.mean(x & y)),
        "only_a": float(np.mean(x & ~y)),
        "only_b": float(np.mean(~x & y)),
        "neither": float(np.mean(~x & ~y)),
        "n": int(n),
    }


def kappa_interval(
    a: Sequence[bool], b: Sequence[bool], *, iters: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of κ over facts (resampled with replacement, seeded).

    Resamples where κ is undefined are left out; (NaN, NaN) when none is defined."""
    x, y = _pair(a, b)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(iters, x.size))
    xs, ys = x[idx], y[idx]
    p_o = (xs == ys).mean(axis=1)
    pa, pb = xs.mean(axis=1), ys.mean(axis=1)
    p_e = pa * pb + (1 - pa) * (1 - pb)
    ok = ~np.isclose(p_e, 1.0)
    if not ok.any():
        return float("nan"), float("nan")
    kappas = (p_o[ok] - p_e[ok]) / (1 - p_e[ok])
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(kappas, [tail, 100 - tail])
    return float(lo), float(hi)
