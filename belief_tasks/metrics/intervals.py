"""Estimates and intervals of a budgeted run: a stratified sample of facts, strata = relations.

The design (``belief_tasks.facts.budget``): relation h holds N_h facts, n_h of them drawn by simple
random sampling without replacement. The unit (cluster) is one fact with all its prompts.

Every metric is written as a function g of the *stratum totals* of per-fact columns
(``belief_tasks.metrics.budgeted``): T_hj = sum over the N_h facts of relation h of y_ij. A sample
estimates them with the relation-size weights of the design (the Horvitz-Thompson totals)

    T^_hj = (N_h / n_h) * sum_{i drawn in h} y_ij,

and the metric with g(T^). With every fact drawn T^ = T and g(T^) is the full run's value. Ratios
(pooled accuracy), means of per-relation ratios (macro accuracy, MONITOR), maxima over templates
(coverage) are all functions of T, so one estimator serves them all, and relations sampled above
the budget (``MIN_PER_RELATION``) are weighted down by N_h / n_h.

Variance, two methods, both with the finite-population correction (1 - f_h), f_h = n_h / N_h:

* ``jackknife``: the stratified delete-one jackknife (JKn). Replicate (h, i) drops fact i from
  stratum h and reweights h's other facts by n_h / (n_h - 1);
      v = sum_h (1 - f_h) (n_h - 1) / n_h * sum_{i in h} (g_(hi) - mean_h g_(h.))^2.
  For a linear g this is exactly the textbook stratified variance
  sum_h N_h^2 (1 - f_h) s_h^2 / n_h (tested); for a smooth g it is the linearisation variance.
* ``bootstrap``: the Rao-Wu (1988) rescaling bootstrap: in each stratum n_h - 1 facts are drawn
  with replacement (counts m_i) and fact i's weight becomes
      (N_h / n_h) * (1 - lambda_h + lambda_h * n_h / (n_h - 1) * m_i),   lambda_h = sqrt(1 - f_h),
  which makes the bootstrap variance of a linear g equal the stratified variance above, FPC included.

A ``selecting`` statistic (a maximum or minimum over estimates) is biased; under the bootstrap its
estimate is corrected, 2 g(T^) - mean_b g(T*_b), with the standard error of the corrected estimate
(``corrected_replicates``). An interval is estimate +- t_{df, 0.975} * se, df = sum over sampled strata
of (n_h - 1); for a ``share`` (a statistic bounded to [0, 1]) whose t interval leaves [0, 1], the Wilson
score interval at the design's effective sample size n* = p (1 - p) / se^2 (``wilson``), which stays
inside. The tasks use the bootstrap (``scoring.budgeted``); the coverage that backs the 95 %, for
both methods, is measured by ``scripts/budget_coverage.py`` (docs/budget.md). Pure numpy / scipy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

LEVEL = 0.95
METHODS = ("jackknife", "bootstrap")
#: replicates the jackknife evaluates per block (memory: block x strata x columns floats)
BLOCK = 256


@dataclass(frozen=True)
class Design:
    """Which stratum each drawn fact belongs to, and each stratum's population size."""

    strata: np.ndarray  # (n,) stratum index of each drawn fact
    population: np.ndarray  # (H,) N_h

    def __post_init__(self):
        n_h = self.sizes
        if np.any(n_h > self.population):
            raise ValueError(
                f"more facts drawn than a relation holds: n_h {n_h.tolist()} vs N_h {self.population.tolist()}"
            )

    @classmethod
    def of(cls, labels: Sequence[str], population: Mapping[str, int]) -> tuple["Design", list[str]]:
        """From each drawn fact's relation and the relations' population sizes; also the strata's names."""
        names = list(dict.fromkeys(labels))
        missing = [r for r in names if r not in population]
        if missing:
            raise ValueError(f"no population size for relations {missing}")
        index = {r: i for i, r in enumerate(names)}
        strata = np.fromiter((index[r] for r in labels), dtype=np.int64, count=len(labels))
        return cls(strata, np.array([int(population[r]) for r in names], dtype=float)), names

    @property
    def sizes(self) -> np.ndarray:
        return np.bincount(self.strata, minlength=len(self.population)).astype(float)

    @property
    def fpc(self) -> np.ndarray:
        """1 - f_h per stratum."""
        return 1.0 - self.sizes / self.population

    @property
    def df(self) -> int:
        """Degrees of freedom of the variance: sum over strata with something left unsampled of n_h - 1."""
        n_h = self.sizes
        return int(np.sum(np.where((self.fpc > 0) & (n_h > 1), n_h - 1, 0)))


class Totals:
    """Stratum totals with named columns: ``T["correct"]`` is the (..., H) array of that column."""

    def __init__(self, values: np.ndarray, columns: Mapping[str, int]):
        self.values, self.columns = values, columns

    def __getitem__(self, name: str) -> np.ndarray:
        return self.values[..., self.columns[name]]

    def prefixed(self, prefix: str) -> "Totals":
        """The columns named ``prefix`` + name, under their names (one run of ``paired`` units)."""
        return Totals(self.values, {c[len(prefix) :]: j for c, j in self.columns.items() if c.startswith(prefix)})

    def block(self, prefix: str) -> np.ndarray:
        """The (..., H, m) block of the columns named ``prefix`` + an integer, by that integer."""
        return self.values[..., [self.columns[c] for c in numbered(self.columns, prefix)]]


def numbered(columns, prefix: str) -> list[str]:
    """Column names ``prefix`` + an integer, sorted by the integer."""
    found = [c for c in columns if c.startswith(prefix) and c[len(prefix) :].isdigit()]
    return sorted(found, key=lambda c: int(c[len(prefix) :]))


#: a metric as a function of stratum totals, vectorised over leading replicate axes
StatisticFn = Callable[[Totals], np.ndarray]


class Statistic:
    """A metric as a function of stratum totals (``fn``), with what its interval needs to know of it: ``bounds``
    (the range its values lie in, a share's (0, 1); None: unbounded) and ``selects`` (it takes a maximum or
    minimum over estimated quantities). Called as ``fn`` is; a plain function is a statistic with neither mark
    (``marks``)."""

    __slots__ = ("fn", "bounds", "selects")

    def __init__(self, fn: StatisticFn, bounds: tuple[float, float] | None = None, selects: bool = False) -> None:
        self.fn, self.bounds, self.selects = fn, bounds, selects

    def __call__(self, T: Totals) -> np.ndarray:
        return self.fn(T)


def marks(stat: StatisticFn) -> Statistic:
    """``stat`` as a ``Statistic`` (a plain function: unbounded, not selecting)."""
    return stat if isinstance(stat, Statistic) else Statistic(stat)


def selecting(stat: StatisticFn) -> Statistic:
    """Mark a statistic that takes a maximum or minimum over estimated quantities (the best template, the
    best relation): its plug-in estimate is biased away from the full-data value (the winner's curse), so
    the bootstrap corrects it (``intervals``)."""
    s = marks(stat)
    return Statistic(s.fn, s.bounds, True)


def share(stat: StatisticFn) -> Statistic:
    """Mark a statistic whose values lie in [0, 1] (an accuracy, a probability): its interval must too
    (``bounded_interval``)."""
    s = marks(stat)
    return Statistic(s.fn, (0.0, 1.0), s.selects)


@dataclass(frozen=True)
class Units:
    """Per-fact columns of one run: each fact's id and relation, and a matrix of named columns."""

    ids: list[str]
    relations: list[str]
    values: np.ndarray  # (n, k)
    columns: Mapping[str, int]

    @classmethod
    def of(cls, ids: Sequence[str], relations: Sequence[str], columns: Mapping[str, ArrayLike]) -> "Units":
        names = list(columns)
        if len(set(ids)) != len(ids):
            raise ValueError("a fact appears twice among the units")
        values = (
            np.column_stack([np.asarray(columns[c], dtype=float) for c in names]) if names else np.zeros((len(ids), 0))
        )
        return cls(list(ids), list(relations), values, {c: j for j, c in enumerate(names)})

    def take(self, rows: np.ndarray) -> "Units":
        """The units at ``rows`` (a drawn subset)."""
        return Units([self.ids[i] for i in rows], [self.relations[i] for i in rows], self.values[rows], self.columns)


def paired(a: Units, b: Units) -> Units:
    """One run's units beside another's on the same facts (columns ``a:<name>``, ``b:<name>``), for the
    interval of a difference (``difference``): both runs' values of a fact form one unit."""
    if set(a.ids) != set(b.ids):
        only = sorted(set(a.ids) ^ set(b.ids))[:3]
        raise ValueError(f"the runs differ in their facts (e.g. {only}): a paired difference needs the same facts")
    order = {f: i for i, f in enumerate(b.ids)}
    rows = np.array([order[f] for f in a.ids], dtype=np.int64)
    columns = {
        **{f"a:{c}": j for c, j in a.columns.items()},
        **{f"b:{c}": len(a.columns) + j for c, j in b.columns.items()},
    }
    return Units(a.ids, a.relations, np.hstack([a.values, b.values[rows]]), columns)


def difference(stat_a: StatisticFn, stat_b: StatisticFn) -> Statistic:
    """g_a(T of run a) - g_b(T of run b) over ``paired`` units (unbounded; selecting where either is)."""

    def stat(T: Totals) -> np.ndarray:
        return stat_a(T.prefixed("a:")) - stat_b(T.prefixed("b:"))

    return Statistic(stat, None, marks(stat_a).selects or marks(stat_b).selects)


def stratum_sums(design: Design, values: np.ndarray) -> np.ndarray:
    """(H, k) sums of each column over each stratum's drawn facts."""
    out = np.zeros((len(design.population), values.shape[1]))
    np.add.at(out, design.strata, values)
    return out


def totals(design: Design, values: np.ndarray) -> np.ndarray:
    """T^: (H, k) estimated stratum totals, (N_h / n_h) times the drawn facts' sums."""
    return stratum_sums(design, values) * (design.population / np.maximum(design.sizes, 1))[:, None]


def estimate(design: Design, units: Units, stat: Statistic) -> float:
    """g(T^): the metric's estimate (its full-data value when every fact is drawn)."""
    return float(stat(Totals(totals(design, units.values), units.columns)))


def jackknife_totals(design: Design, units: Units):
    """The delete-one replicates' totals, in blocks: yields (rows, (len(rows), H, k) totals); replicate i
    drops drawn fact i. A stratum of one drawn fact has no replicate: its rows keep the full totals."""
    y, h = units.values, design.strata
    n_h, N = design.sizes, design.population
    sums = stratum_sums(design, y)
    base = sums * (N / np.maximum(n_h, 1))[:, None]
    keep = np.maximum(n_h - 1, 1)
    for lo in range(0, len(h), BLOCK):
        rows = np.arange(lo, min(len(h), lo + BLOCK))
        reps = np.broadcast_to(base, (len(rows), *base.shape)).copy()
        at = np.flatnonzero(n_h[h[rows]] > 1)
        hs = h[rows[at]]
        reps[at, hs] = (sums[hs] - y[rows[at]]) * (N[hs] / keep[hs])[:, None]
        yield rows, reps


def jackknife_variance(design: Design, reps: np.ndarray) -> float:
    """sum_h (1 - f_h) (n_h - 1) / n_h * sum_{i in h} (g_(hi) - mean_h)^2 from the (n,) replicate values.
    NaN when a stratum with unsampled facts has a single drawn fact, or a replicate is undefined."""
    n_h, fpc = design.sizes, design.fpc
    if np.any((n_h == 1) & (fpc > 0)) or np.any(~np.isfinite(reps)):
        return float("nan")
    means = np.bincount(design.strata, weights=reps, minlength=len(n_h)) / np.maximum(n_h, 1)
    dev2 = np.bincount(design.strata, weights=(reps - means[design.strata]) ** 2, minlength=len(n_h))
    factor = np.where(n_h > 1, fpc * (n_h - 1) / np.maximum(n_h, 1), 0.0)
    return float(np.sum(factor * dev2))


def jackknife_se(design: Design, units: Units, stats: Mapping[str, StatisticFn]) -> dict[str, float]:
    """The stratified delete-one jackknife standard error of each statistic, FPC included (module docstring)."""
    reps = {name: np.empty(len(design.strata)) for name in stats}
    for rows, block in jackknife_totals(design, units):
        T = Totals(block, units.columns)
        for name, stat in stats.items():
            reps[name][rows] = stat(T)
    return {name: float(np.sqrt(jackknife_variance(design, r))) for name, r in reps.items()}


def bootstrap_totals(design: Design, units: Units, reps: int = 1000, seed: int = 0) -> np.ndarray:
    """(reps, H, k) totals of Rao-Wu rescaled bootstrap replicates (module docstring)."""
    rng = np.random.default_rng(seed)
    N, fpc = design.population, design.fpc
    out = np.zeros((reps, len(N), units.values.shape[1]))
    order = np.argsort(design.strata, kind="stable")
    bounds = np.searchsorted(design.strata[order], np.arange(len(N) + 1))
    for h in range(len(N)):
        y = units.values[order[bounds[h] : bounds[h + 1]]]
        n = len(y)
        if n < 2:
            out[:, h] = (N[h] / max(n, 1)) * y.sum(0)
            continue
        counts = rng.multinomial(n - 1, np.full(n, 1.0 / n), size=reps)
        lam = np.sqrt(fpc[h])
        out[:, h] = (N[h] / n) * ((1.0 - lam + lam * n / (n - 1) * counts) @ y)
    return out


#: second-level draws per replicate for the standard error of a bias-corrected estimate
PARTNERS = 20


def bootstrap_moments(
    design: Design, units: Units, stats: Mapping[str, StatisticFn], reps: int = 1000, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """(mean, SD) of each statistic over the bootstrap replicates (undefined ones left out). For a
    ``selecting`` statistic the SD is that of the bias-corrected estimate (``corrected_replicates``)."""
    totals_b = bootstrap_totals(design, units, reps, seed)
    T = Totals(totals_b, units.columns)
    base = totals(design, units.values)
    out = {}
    for name, stat in stats.items():
        values = np.asarray(stat(T), dtype=float)
        spread = values
        if marks(stat).selects:
            spread = corrected_replicates(stat, totals_b, base, units.columns, values, seed)
        ok = np.isfinite(values) & np.isfinite(spread)
        out[name] = (float(values[ok].mean()), float(spread[ok].std(ddof=1))) if ok.sum() > 1 else (float("nan"),) * 2
    return out


def corrected_replicates(
    stat: StatisticFn, totals_b: np.ndarray, base: np.ndarray, columns, values: np.ndarray, seed: int
) -> np.ndarray:
    """Each replicate's own bias-corrected value, 2 g(T*_b) - mean_j g(T*_b + T*_j - T^), so that their SD is
    the standard error of the corrected estimate (which varies more than g(T^): the correction is itself
    estimated). The second level reuses ``PARTNERS`` other replicates' deviations as draws around T*_b
    (the deviations of totals are nearly additive), instead of a bootstrap of every replicate."""
    rng = np.random.default_rng([seed, 1])
    partners = rng.integers(0, len(totals_b), (len(totals_b), PARTNERS))
    second = np.empty(len(totals_b))
    for lo in range(0, len(totals_b), 64):
        block = slice(lo, lo + 64)
        shifted = totals_b[block, None] + (totals_b[partners[block]] - base)
        found = np.asarray(stat(Totals(shifted, columns)), dtype=float)
        kept = ~np.isnan(found)  # a statistic undefined on every draw (no such answers in the run) stays NaN, quietly
        second[block] = np.where(kept, found, 0.0).sum(1) / np.where(kept.any(1), kept.sum(1), np.nan)
    return 2 * values - second


def t_quantile(df: int, level: float = LEVEL) -> float:
    """Student's t quantile for a two-sided ``level`` interval (the normal one when df is 0)."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df)) if df > 0 else float(stats.norm.ppf(0.5 + level / 2))


def wilson(p: float, se: float, t: float, n: float | None = None) -> tuple[float, float]:
    """The Wilson score interval for a share p at the effective sample size n* = p (1 - p) / se^2 (the
    number of independent facts that would give the design's standard error; Korn and Graubard 1998),
    or at ``n`` where given:

        (p + t^2 / (2 n*)  +-  t sqrt(p (1 - p) / n* + t^2 / (4 n*^2))) / (1 + t^2 / n*),

    inside [0, 1] for every p in [0, 1] (p is clipped to [0, 1] first)."""
    p = min(max(p, 0.0), 1.0)
    if n is None:
        if not (se > 0) or p in (0.0, 1.0):
            return p, p
        n = p * (1 - p) / se**2
    centre = (p + t * t / (2 * n)) / (1 + t * t / n)
    half = t * np.sqrt(p * (1 - p) / n + t * t / (4 * n * n)) / (1 + t * t / n)
    # it always holds p (rounding could put an end a hair past it when p is 0 or 1)
    return float(min(max(centre - half, 0.0), p)), float(max(min(centre + half, 1.0), p))


def bounded_interval(stat: StatisticFn, estimate: float, se: float, t: float, sampled: int = 0) -> tuple[float, float]:
    """estimate +- t * se; for a ``share``: where that interval leaves [0, 1], ``wilson`` at the effective
    sample size, and where every drawn fact agrees (estimate 0 or 1, se 0, yet ``sampled`` facts come from
    relations with facts left undrawn) ``wilson`` at those ``sampled`` facts, not a zero-width interval."""
    low, high = estimate - t * se, estimate + t * se
    bounds = marks(stat).bounds
    if not bounds or not np.isfinite(estimate):
        return low, high
    if se == 0 and sampled > 0 and estimate in (0.0, 1.0):
        return wilson(estimate, se, t, n=sampled)
    if low < 0.0 or high > 1.0:
        return wilson(estimate, se, t)
    return low, high


@dataclass(frozen=True)
class Interval:
    """A metric's estimate, its standard error and its two-sided interval."""

    estimate: float
    se: float
    low: float
    high: float
    method: str
    level: float = LEVEL


def intervals(
    design: Design,
    units: Units,
    stats: Mapping[str, StatisticFn],
    method: str = "bootstrap",
    level: float = LEVEL,
    reps: int = 1000,
    seed: int = 0,
) -> dict[str, Interval]:
    """Each statistic's estimate, its standard error by ``method`` and estimate +- t * se.

    The estimate is g(T^), except for a ``selecting`` statistic under the bootstrap, whose estimate is
    bias-corrected: 2 g(T^) - mean of g over the replicates (the replicates' excess over g(T^) estimates
    the plug-in's excess over the full-data value)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    T = Totals(totals(design, units.values), units.columns)
    plain = {name: float(stat(T)) for name, stat in stats.items()}
    if method == "jackknife":
        centre, ses = plain, jackknife_se(design, units, stats)
    else:
        moments = bootstrap_moments(design, units, stats, reps, seed)
        centre = {
            name: 2 * plain[name] - moments[name][0] if marks(stat).selects and design.df else plain[name]
            for name, stat in stats.items()
        }
        ses = {name: moments[name][1] for name in stats}
    t = t_quantile(design.df, level)
    sampled = int(design.sizes[design.fpc > 0].sum())  # drawn facts of relations not drawn whole
    return {
        name: Interval(
            centre[name], ses[name], *bounded_interval(stat, centre[name], ses[name], t, sampled), method, level
        )
        for name, stat in stats.items()
    }


def interval(design: Design, units: Units, stat: StatisticFn, method: str = "bootstrap", **kwargs) -> Interval:
    """``intervals`` for one statistic."""
    return intervals(design, units, {"value": stat}, method, **kwargs)["value"]
