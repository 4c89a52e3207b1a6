"""Standard errors shared by every family's metrics.

* ``mean_stderr``: the standard error of a mean, s / sqrt(n) with the sample standard deviation
  s (ddof = 1); NaN for n < 2.
* ``binomial_stderr``: the standard error of a share of 0/1 outcomes, sqrt(p (1 − p) / n) (the
  population form lm-eval uses for accuracies); NaN for n = 0.
* ``weighted_mean_stderr``: the standard error of a weighted mean with fixed weights (linearisation);
  equal weights give ``mean_stderr``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike


def mean_stderr(values: ArrayLike) -> float:
    """Standard error of a mean: sample std (ddof=1) / sqrt(n); NaN for n < 2."""
    v = np.asarray(values, dtype=float)
    return float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def binomial_stderr(correct: ArrayLike) -> float:
    """Standard error of a mean of 0/1 outcomes, sqrt(p (1 - p) / n)."""
    c = np.asarray(correct, dtype=float)
    if len(c) == 0:
        return float("nan")
    p = c.mean()
    return float(np.sqrt(p * (1 - p) / len(c)))


def weighted_mean_stderr(values: Sequence[float], weights: Sequence[float]) -> float:
    """Standard error of m = sum_i w_i x_i / sum_i w_i with the weights held fixed (the linearisation of a
    ratio):

        se^2 = n / (n - 1) * sum_i w_i^2 (x_i - m)^2 / (sum_i w_i)^2,

    which for equal weights is s^2 / n, ``mean_stderr``. NaN for n < 2."""
    x, w = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    if x.size < 2:
        return float("nan")
    m = np.sum(w * x) / np.sum(w)
    return float(np.sqrt(x.size / (x.size - 1) * np.sum(w**2 * (x - m) ** 2)) / np.sum(w))
