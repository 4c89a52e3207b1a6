"""MONITOR scoring (Wang et al., 2024): records -> per-fact quantities -> ``belief_tasks.metrics.monitor``.

One record per fact (``MonitorRecord``): the gold object's per-subword probabilities under every
anchor (positive context, R frames, M negative contexts), the greedy answers' correctness (under the
positive context and the R frames; with ``monitor_accuracy: paper`` also the R x M frame x
negative-interference grid of section 4.3) and the requests and tokens each group cost. Each
aggregation scores every relation alone, then averages relations without weights (Table 4), so a
per-relation number is the same aggregation on one relation's records (``per_relation``). Standard
errors: bootstrap over facts (100 resamples, seed 0). Known fact: the greedy answer under the
primary anchor (positive context) is correct (the reference code's filter for its primary anchor;
the paper has no per-fact rule).

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence, TypedDict

from belief_tasks.metrics import monitor as monitor_metrics
from belief_tasks.metrics.budgeted import monitor as budgeted
from belief_tasks.metrics.intervals import Units
from belief_tasks.scoring.common import Metric, NoStderr, once

MAX_FRAMES = 7  # FKTC: 7 frames, 6 for P264 and P276
BOOTSTRAP_ITERS = 100
#: the ``monitor_accuracy`` knob (``belief_tasks.families.MonitorOptions``), stamped into each record as
#: ``accuracy``: which greedy answers a fact gets besides its anchors
ACCURACY_MODES = ("frames", "paper", "none")
#: the ``monitor_match`` knob, stamped into each record as ``match``: when a greedy answer is right. ``contains``: it
#: contains the object or an alias (``matching.contains_answer``); ``exact``: the reference ``eval.py``'s test
#: (``matching.eval_py_exact``)
MATCH_RULES = ("contains", "exact")


class MonitorRecord(TypedDict):
    """One MONITOR fact: per-subword probabilities of the gold object under every anchor."""

    fact_id: str  # local to its dataset
    relation: str
    fact_key: dict  # the cross-dataset key, schema.FactKey.as_record(): the report joins datasets on it
    template_id: str
    subject_form: str
    object: str
    route: str
    units: list
    n_tokens: int
    primary: list  # per-unit probabilities under the positive context
    frame_ids: list
    frames: list  # per frame, per-unit probabilities
    negative_labels: list
    negatives: list  # per misleading context, per-unit probabilities
    positive_answer: str | None  # None with monitor_accuracy: none (no greedy answers)
    positive_correct: int | None
    answers: list  # per frame ([] with monitor_accuracy: none)
    correct: list  # per frame, 0/1
    interference_answers: list  # monitor_accuracy: paper: [frame j][negative m], R x M; else []
    interference_correct: list  # the same grid, 0/1
    alpha: list
    only_correct_primary: bool
    accuracy: str  # the monitor_accuracy knob: frames, paper or none
    match: str  # the monitor_match knob: contains or exact (absent in records before it)
    cost: dict  # {"anchors" | "answers" | "interference": {"requests": n, "tokens": n}}


# --- records -> per-fact rows -> columns -------------------------------------------------------------


def facts_of(records: Sequence[Mapping]) -> list[dict]:
    """Per-fact quantities of eqs. 1-3 (``monitor_metrics.fact_quantities``) with what the statistics group by, once
    per run's records: every metric (the anchors' and accuracies, each with a bootstrap) reads them, and computing
    them takes seconds on all of FKTC."""
    return once(
        records,
        ("monitor", "facts"),
        lambda: [
            {
                **monitor_metrics.fact_quantities(r["primary"], r["frames"], r["negatives"]),
                "relation": r["relation"],
                "correct": r["correct"],
                "positive_correct": r["positive_correct"],
                "interference_correct": r.get("interference_correct"),  # absent in records before monitor_accuracy
                "scored": (not r.get("only_correct_primary")) or bool(r["positive_correct"]),
                "alpha": tuple(r.get("alpha") or monitor_metrics.DEFAULT_ALPHA),
            }
            for r in records
        ],
    )


def _column(facts: list[dict], key: str, anchors: bool = False) -> tuple[list, list]:
    """(relations, values of ``key``) of the facts that have it (a record of ``monitor_accuracy: none`` has
    no answers, one of ``frames`` no R x M grid); ``anchors``: only the facts the anchor metrics score."""
    rows = [f for f in facts if f["scored"]] if anchors else facts
    rows = [f for f in rows if f[key] is not None and not (isinstance(f[key], list) and not f[key])]
    return [f["relation"] for f in rows], [f[key] for f in rows]


def has_paper_accuracy(records: Sequence[Mapping]) -> bool:
    """Whether a run asked for the R x M answers (``monitor_accuracy: paper``): some record has its grid."""
    return any(r.get("interference_correct") for r in records)


def _alpha(facts: list[dict]) -> tuple:
    alphas = {f["alpha"] for f in facts}
    if len(alphas) > 1:
        raise ValueError(f"records mix monitor_alpha settings {sorted(alphas)}")
    return alphas.pop() if alphas else monitor_metrics.DEFAULT_ALPHA


# --- which facts a model knows -------------------------------------------------------------------------


def correct(record: Mapping) -> bool:
    """The greedy answer under the positive context contains the object."""
    return bool(record["positive_correct"])


def known(records: Sequence[Mapping]) -> dict[str, bool]:
    """fact -> known (``correct``)."""
    return {r["fact_id"]: correct(r) for r in records}


# --- statistics over per-fact rows, and the aggregations over records built from them --------------------


def _monitor(facts: list[dict]) -> float:
    scored = [f for f in facts if f["scored"]]
    pfd, ird, prob = ([f[key] for f in scored] for key in ("pfd", "ird", "primary_prob"))
    return monitor_metrics.monitor_over_relations([f["relation"] for f in scored], pfd, ird, prob, _alpha(scored))


def _mean_of(key: str, anchors: bool):
    return lambda facts: monitor_metrics.mean_over_relations(*_column(facts, key, anchors))


def _accuracy(which: str):
    return lambda facts: monitor_metrics.accuracy_over_relations(*_column(facts, "correct"), which)


def _relation_extreme(which: str):
    return lambda facts: monitor_metrics.accuracy_across_relations(*_column(facts, "correct"), which)


def _paper_accuracy(which: str):
    return lambda facts: monitor_metrics.accuracy_over_relations(*_column(facts, "interference_correct"), which)


def _paper_extreme(which: str):
    return lambda facts: monitor_metrics.accuracy_across_relations(*_column(facts, "interference_correct"), which)


def _frame_accuracy(j: int):
    return lambda facts: monitor_metrics.frame_accuracy_over_relations(*_column(facts, "correct"), j)


FRAME_METRICS = tuple(f"acc_frame_{j}" for j in range(MAX_FRAMES))

#: metric -> its statistic of per-fact rows (``facts_of``): the aggregations below apply it to a run's rows, and
#: ``per_relation`` to each relation's, without recomputing the rows
STATISTICS: dict[str, Callable[[list[dict]], float]] = {
    "monitor": _monitor,
    "pfd": _mean_of("pfd", True),
    "ird": _mean_of("ird", True),
    "primary_prob": _mean_of("primary_prob", True),
    "frame_prob": _mean_of("frame_prob", True),
    "negative_prob": _mean_of("negative_prob", True),
    "acc_avg": _accuracy("avg"),
    "acc_max": _accuracy("max"),
    "acc_min": _accuracy("min"),
    "acc_positive": _mean_of("positive_correct", False),
    "acc_relation_max": _relation_extreme("max"),
    "acc_relation_min": _relation_extreme("min"),
    **{name: _frame_accuracy(j) for j, name in enumerate(FRAME_METRICS)},
    "acc_paper_avg": _paper_accuracy("avg"),
    "acc_paper_max": _paper_accuracy("max"),
    "acc_paper_min": _paper_accuracy("min"),
    "acc_paper_relation_max": _paper_extreme("max"),
    "acc_paper_relation_min": _paper_extreme("min"),
}


def _aggregation(metric: str):
    """``metric``'s aggregation over records (its ``STATISTICS`` entry on the run's per-fact rows) and its
    bootstrap standard error over facts."""
    stat = STATISTICS[metric]

    def agg(records):
        return stat(facts_of(records))

    def stderr(records):
        return monitor_metrics.bootstrap_stderr(facts_of(records), stat, iters=BOOTSTRAP_ITERS, seed=0)

    return agg, stderr


#: metric -> (its aggregation over records, its standard error)
AGGREGATIONS = {metric: _aggregation(metric) for metric in STATISTICS}
# each metric's aggregation by name, as the tests and the report sections call them
agg_monitor = AGGREGATIONS["monitor"][0]
agg_pfd = AGGREGATIONS["pfd"][0]
agg_ird = AGGREGATIONS["ird"][0]
agg_primary_prob = AGGREGATIONS["primary_prob"][0]
agg_frame_prob = AGGREGATIONS["frame_prob"][0]
agg_negative_prob = AGGREGATIONS["negative_prob"][0]
agg_acc_avg = AGGREGATIONS["acc_avg"][0]
agg_acc_max = AGGREGATIONS["acc_max"][0]
agg_acc_min = AGGREGATIONS["acc_min"][0]
agg_acc_positive = AGGREGATIONS["acc_positive"][0]
agg_acc_relation_max = AGGREGATIONS["acc_relation_max"][0]
agg_acc_relation_min = AGGREGATIONS["acc_relation_min"][0]
agg_acc_frame_0 = AGGREGATIONS["acc_frame_0"][0]
agg_acc_frame_1 = AGGREGATIONS["acc_frame_1"][0]
agg_acc_frame_2 = AGGREGATIONS["acc_frame_2"][0]
agg_acc_frame_3 = AGGREGATIONS["acc_frame_3"][0]
agg_acc_frame_4 = AGGREGATIONS["acc_frame_4"][0]
agg_acc_frame_5 = AGGREGATIONS["acc_frame_5"][0]
agg_acc_frame_6 = AGGREGATIONS["acc_frame_6"][0]
agg_acc_paper_avg = AGGREGATIONS["acc_paper_avg"][0]
agg_acc_paper_max = AGGREGATIONS["acc_paper_max"][0]
agg_acc_paper_min = AGGREGATIONS["acc_paper_min"][0]
agg_acc_paper_relation_max = AGGREGATIONS["acc_paper_relation_max"][0]
agg_acc_paper_relation_min = AGGREGATIONS["acc_paper_relation_min"][0]


def _cost_aggregation(group: str, field: str):
    """Total ``field`` (requests or tokens) of one request group over the records; NaN when no record
    counted its cost (records before the count existed). A total has no standard error (``COST_STDERR``)."""

    def agg(records):
        costs = [r["cost"][group][field] for r in records if r.get("cost")]
        return float(sum(costs)) if costs else float("nan")

    return agg


#: cost metric -> (request group in ``MonitorRecord.cost``, field)
COST_METRICS = {
    f"cost_{short}_{field}": (group, field)
    for short, group in (("anchor", "anchors"), ("answer", "answers"), ("paper", "interference"))
    for field in ("requests", "tokens")
}
_COST_AGGS = {name: _cost_aggregation(*where) for name, where in COST_METRICS.items()}
#: a run's cost is a count of what it asked, exact
COST_STDERR = NoStderr("a total of the requests or tokens the run asked for, exact")
(
    agg_cost_anchor_requests,
    agg_cost_anchor_tokens,
    agg_cost_answer_requests,
    agg_cost_answer_tokens,
    agg_cost_paper_requests,
    agg_cost_paper_tokens,
) = _COST_AGGS.values()


def budget_units(records: Sequence[Mapping]) -> Units:
    """A budgeted run's per-fact columns (``metrics.budgeted.monitor``: its estimates of the full run)."""
    facts = facts_of(records)
    costs = {
        name: [r["cost"][group][field] if r.get("cost") else float("nan") for r in records]
        for name, (group, field) in COST_METRICS.items()
    }
    return budgeted.units(
        [r["fact_id"] for r in records],
        [f["relation"] for f in facts],
        facts,
        [f["correct"] for f in facts],
        [f["positive_correct"] for f in facts],
        [f["scored"] for f in facts],
        _alpha(facts),
        MAX_FRAMES,
        [f["interference_correct"] or [] for f in facts],
        costs,
    )


def _metric(name: str, higher_is_better: bool, budgeted_statistic) -> Metric:
    agg, stderr = AGGREGATIONS[name]
    return Metric(agg, stderr, higher_is_better, budgeted_statistic)


#: metric name -> its declaration (aggregation, standard error, higher is better, budgeted statistic): what the task
#: classes wire and the report recomputes
METRICS = {
    "monitor": _metric("monitor", False, budgeted.monitor),
    "pfd": _metric("pfd", False, budgeted.anchor_mean("pfd")),
    "ird": _metric("ird", False, budgeted.anchor_mean("ird")),
    "primary_prob": _metric("primary_prob", True, budgeted.anchor_mean("primary_prob")),
    "frame_prob": _metric("frame_prob", True, budgeted.anchor_mean("frame_prob")),
    "negative_prob": _metric("negative_prob", True, budgeted.anchor_mean("negative_prob")),
    "acc_avg": _metric("acc_avg", True, budgeted.per_relation("avg")),
    "acc_max": _metric("acc_max", True, budgeted.per_relation("max")),
    "acc_min": _metric("acc_min", True, budgeted.per_relation("min")),
    "acc_positive": _metric("acc_positive", True, budgeted.positive_accuracy),
    "acc_relation_max": _metric("acc_relation_max", True, budgeted.across_relations("max")),
    "acc_relation_min": _metric("acc_relation_min", True, budgeted.across_relations("min")),
    **{name: _metric(name, True, budgeted.frame_accuracy(j)) for j, name in enumerate(FRAME_METRICS)},
    "acc_paper_avg": _metric("acc_paper_avg", True, budgeted.per_relation("avg", "grid", "ingrid")),
    "acc_paper_max": _metric("acc_paper_max", True, budgeted.per_relation("max", "grid", "ingrid")),
    "acc_paper_min": _metric("acc_paper_min", True, budgeted.per_relation("min", "grid", "ingrid")),
    "acc_paper_relation_max": _metric(
        "acc_paper_relation_max", True, budgeted.across_relations("max", "grid", "ingrid")
    ),
    "acc_paper_relation_min": _metric(
        "acc_paper_relation_min", True, budgeted.across_relations("min", "grid", "ingrid")
    ),
    **{name: Metric(agg, COST_STDERR, False, budgeted.cost(name)) for name, agg in _COST_AGGS.items()},
}
#: metrics of the greedy answers under the positive context and the frames (none with ``monitor_accuracy: none``)
FRAME_ACCURACY_METRICS = (
    "acc_avg",
    "acc_max",
    "acc_min",
    "acc_positive",
    "acc_relation_max",
    "acc_relation_min",
    *FRAME_METRICS,
)
#: section 4.3's R x M accuracies (``monitor_accuracy: paper`` only)
PAPER_ACCURACY_METRICS = tuple(name for name in METRICS if name.startswith("acc_paper_"))


def metrics_of(record: Mapping) -> list[str]:
    """The metrics a record has a value for (the names its task logs it under). A relation with R frames
    has no frame R (P264, P276: 6): its facts skip acc_frame_R.. rather than count as wrong, and a run of
    6-frame relations reports no acc_frame_6. Without greedy answers (``none``) no accuracy is reported;
    the R x M accuracies only with ``paper``."""
    skip = set(FRAME_METRICS[len(record["frame_ids"]) :])
    mode = record.get("accuracy", "frames")
    if mode == "none":
        skip |= set(FRAME_ACCURACY_METRICS)
    if mode != "paper":
        skip |= set(PAPER_ACCURACY_METRICS)
    return [name for name in METRICS if name not in skip]


def per_relation(records: Sequence[Mapping], metric: str) -> dict[str, float]:
    """relation -> ``metric`` on that relation's records alone (Table 11's cells): the metric's statistic on
    the relation's per-fact rows, which are the rows of the whole run computed once."""
    stat = STATISTICS[metric]
    facts = facts_of(records)
    by_relation: dict[str, list[dict]] = {}
    for f in facts:
        by_relation.setdefault(f["relation"], []).append(f)
    return {rel: float(stat(rows)) for rel, rows in by_relation.items()}
