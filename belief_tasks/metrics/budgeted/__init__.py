"""Each family's metrics as functions of stratum totals, for budgeted runs.

A family module holds ``units(...)`` (per-fact columns from the arrays its metrics take) and its
statistics (each a ``Statistic``: stratum totals -> value, ``belief_tasks.metrics.intervals``), marked
``share`` where the value lies in [0, 1]. Which metric a statistic is, or that a metric has none, is
declared with the metric, in ``belief_tasks.scoring.<family>.METRICS`` (``Metric.budgeted``).
With every fact drawn a statistic equals the family's metric on the full data (tested per family);
on a sample it is the design-weighted estimate of that value, and the intervals module gives its
standard error and interval. The builders below are the shapes the metrics share: a pooled ratio
over all facts, a mean over relations of per-relation ratios, and a total.

Pure numpy.
"""

from __future__ import annotations

import numpy as np

from belief_tasks.metrics.intervals import Totals


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den is 0 (no warning)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    return np.divide(num, den, out=np.full(np.broadcast(num, den).shape, np.nan), where=den != 0)


def nanmean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mean over ``axis`` of the finite entries; NaN where none is (no warning)."""
    ok = np.isfinite(values)
    return ratio(np.where(ok, values, 0.0).sum(axis), ok.sum(axis))


def pooled(num: str, den: str):
    """sum_h T[num] / sum_h T[den]: a share pooled over every fact of every relation."""

    def stat(T: Totals) -> np.ndarray:
        return ratio(T[num].sum(-1), T[den].sum(-1))

    return stat


def relation_mean(num: str, den: str):
    """mean over relations with T[den] > 0 of T[num] / T[den]: each relation scored alone, then unweighted."""

    def stat(T: Totals) -> np.ndarray:
        return nanmean(ratio(T[num], T[den]))

    return stat


def total(column: str):
    """sum_h T[column]: the full run's total of a per-fact count (the Horvitz-Thompson total on a sample);
    NaN when the units lack the column (records from before it was counted)."""

    def stat(T: Totals) -> np.ndarray:
        return T[column].sum(-1) if column in T.columns else np.full(T.values.shape[:-2], np.nan)

    return stat
