"""A family's ``METRICS`` as lm-eval and ``belief-report`` call them: the one place where a ``Metric`` becomes
what lm-eval needs.

lm-eval takes a task's metrics as ``metric_list`` entries, each with an ``aggregation`` callable over the values
``process_results`` logged under the metric (the doc's record, or a ``SameRecord`` of it), and asks its
``stderr_for_metric`` for the standard error of each aggregation it holds. ``metric_list`` builds the entries
from a metric table: each an ``Aggregation`` (the metric on the records behind the logged values; on a budgeted
run's records the estimate of the full run's value, ``scoring.budgeted``) and, on a budgeted run, each
estimated metric's 95 % interval as a metric of its own, ``<metric>_ci95`` (``IntervalOf``). Our
``stderr_for_metric`` hook (``belief_tasks.hooks.harness``) hands lm-eval a ``Reported``'s ``stderr``: a float, or
``NoStderr(reason)`` (``scoring.common``: lm-eval's own "N/A", which it prints and writes into the results JSON as
such), and ``belief-report`` recomputes with the same objects (``aggregations``), the reason included. Nothing is
read from or set on a function.

Both are callable objects, not functions: lm-eval's results JSON records a callable's source where it has one
(``TaskConfig.to_dict``) and ``str()`` otherwise, here the metric's declaration (``repr``); deep copies of a
task's config share them (``__deepcopy__``: they hold no state of a run).

Pure: no lm-eval.
"""

from __future__ import annotations

from typing import Any, Mapping

from belief_tasks.metrics.intervals import Interval
from belief_tasks.scoring.budgeted import INTERVAL_SUFFIX, Estimators, estimate, estimate_stderr, estimates, is_budgeted
from belief_tasks.scoring.common import Bound, Metric, NoStderr, NotEstimable, defined, records_behind

#: the standard error of an interval's own entry (``IntervalOf``)
INTERVAL_STDERR = NoStderr("an interval: its bounds are the uncertainty of the estimate")


class Reported:
    """What lm-eval calls as a metric's aggregation; ``stderr(items)`` its standard error on the same items, a float
    or ``NoStderr(reason)``."""

    __slots__ = ("name", "family")

    def __init__(self, name: str, family: str) -> None:
        self.name = name
        self.family = family

    def __call__(self, items: list) -> Any:
        raise NotImplementedError

    def stderr(self, items: list) -> float | NoStderr:
        raise NotImplementedError

    def __deepcopy__(self, memo: dict) -> Reported:
        return self


class Aggregation(Reported):
    """One metric of a task as lm-eval aggregates it: ``agg(items)`` over the values logged under the metric
    (records or ``SameRecord`` references). On a full run's records the metric's aggregation; on a budgeted
    run's the design-weighted estimate of the full run's value (NaN where ``NotEstimable``). Its standard error
    (``stderr``) and interval (``interval``) follow the same rule. ``estimators`` None: a family without a
    budget, the plain aggregation on every run."""

    __slots__ = ("metric", "estimators")

    def __init__(self, name: str, metric: Metric, estimators: Estimators | None, family: str = "") -> None:
        super().__init__(name, family)
        self.metric = metric
        self.estimators = estimators

    def __call__(self, items: list) -> Any:
        records = records_behind(items)
        if self.estimators is not None and is_budgeted(records):
            return estimate(self.estimators, self.name, records)
        return self.metric.aggregation(records)

    def has_stderr(self, budgeted: bool) -> bool:
        """Whether it has a standard error on a full run (the metric's own) or on a ``budgeted`` one (the estimate's:
        a budgeted run estimates even an exact count, so every metric with an interval has one)."""
        if budgeted and self.estimators is not None:
            return self.name in self.estimators.statistics
        return self.metric.has_stderr

    def stderr(self, items: list) -> float | NoStderr:
        """The standard error of ``self(items)``: on a full run's records the metric's own, or its ``NoStderr``
        (``UNDEFINED`` where its formula gives NaN); on a budgeted run's the estimate's, or the ``NotEstimable``
        reason."""
        records = records_behind(items)
        if self.estimators is not None and is_budgeted(records):
            declared = self.metric.budgeted
            if isinstance(declared, NotEstimable):
                return NoStderr(f"not estimable from a budgeted run's sample: {declared.reason}")
            return defined(estimate_stderr(self.estimators, self.name, records))
        own = self.metric.stderr
        return own if isinstance(own, NoStderr) else defined(own(records))

    def interval(self, items: list) -> Interval | None:
        """The 95 % interval of a budgeted run's estimate; None on a full run or for a metric without a statistic."""
        records = records_behind(items)
        est = self.estimators
        if est is None or not is_budgeted(records) or self.name not in est.statistics:
            return None
        return estimates(est, records)[self.name]

    def __repr__(self) -> str:
        return f"belief_tasks.scoring.{self.family}.METRICS[{self.name!r}]"


class IntervalOf(Reported):
    """``<metric>_ci95`` on a budgeted run: [low, high] of ``metric``'s 95 % interval, each a ``Bound`` (four
    decimals in the printed table, every digit in the results JSON). It reads the records ``metric`` reads (the
    doc's record, logged once: ``BeliefTask.process_results``) and the estimates computed for them. It has no
    standard error of its own (lm-eval prints "N/A")."""

    __slots__ = ("of", "estimators")

    def __init__(self, of: str, estimators: Estimators, family: str = "") -> None:
        super().__init__(of + INTERVAL_SUFFIX, family)
        self.of = of
        self.estimators = estimators

    def __call__(self, items: list) -> list:
        found = estimates(self.estimators, records_behind(items))[self.of]
        return [Bound(found.low), Bound(found.high)]

    def stderr(self, items: list) -> NoStderr:
        return INTERVAL_STDERR

    def __repr__(self) -> str:
        return f"95 % interval of belief_tasks.scoring.{self.family}.METRICS[{self.of!r}] (budgeted run)"


def aggregations(family: str, metrics: Mapping[str, Metric], estimators: Estimators | None) -> dict[str, Aggregation]:
    """metric name -> its ``Aggregation``: what lm-eval aggregates and ``belief-report`` recomputes."""
    return {name: Aggregation(name, m, estimators, family) for name, m in metrics.items()}


def metric_list(
    family: str, metrics: Mapping[str, Metric], estimators: Estimators | None, budgeted: bool
) -> list[dict[str, Any]]:
    """lm-eval's ``metric_list`` of a task reporting ``metrics``: one entry per metric (``Aggregation``) and, on a
    ``budgeted`` run of a family with ``estimators``, one ``<metric>_ci95`` per metric with a statistic
    (``IntervalOf``, in the same order, after them)."""
    entries: list[dict[str, Any]] = [
        {"metric": name, "aggregation": agg, "higher_is_better": agg.metric.higher_is_better}
        for name, agg in aggregations(family, metrics, estimators).items()
    ]
    if budgeted and estimators is not None:
        entries += [
            {
                "metric": name + INTERVAL_SUFFIX,
                "aggregation": IntervalOf(name, estimators, family),
                "higher_is_better": m.higher_is_better,
            }
            for name, m in metrics.items()
            if name in estimators.statistics
        ]
    return entries


def intervals_of(entries: list[dict[str, Any]]) -> dict[str, str]:
    """``<metric>_ci95`` -> ``metric`` for the interval entries of a ``metric_list``."""
    return {e["metric"]: e["aggregation"].of for e in entries if isinstance(e["aggregation"], IntervalOf)}
