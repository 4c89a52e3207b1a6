"""Standard errors shared by every family's metrics.

* ``mean_stderr``: the standard error of a mean, s / sqrt(n) with the sample standard deviation
  s (ddof = 1); NaN for n < 2.
* ``binomial_stderr``: the standard error of a share of 0/1 outcomes, sqrt(p (1 − p) / n) (the
  population form lm-eval uses for accuracies); NaN for n = 0.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def mean_stderr(values: Sequence[float]) -> float:
    """Standard error of a mean: sample std (ddof=1) / sqrt(n); NaN for n < 2."""
    v = np.asarray(values, dtype=float)
    return float(np.std(v, ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def binomial_stderr(correct: Sequence[float]) -> float:
    """Standard error of a mean of 0/1 outcomes, sqrt(p (1 - p) / n)."""
    c = np.asarray(correct, dtype=float)
    if len(c) == 0:
        return float("nan")
    p = c.mean()
    return float(np.sqrt(p * (1 - p) / len(c)))
