"""MONITOR harness glue (``belief_monitor``, ``belief_monitor_sample``): documents, requests,
per-fact records, aggregations.

One document per fact. ``MonitorTask.construct_requests`` sends, in this order:

1. the anchors: the gold object's per-subword probabilities under 1 positive context, R frames
   and M negative contexts (``belief_tasks.prompts.monitor``), by the route ``monitor_route``
   picks (``belief_tasks.tasks.monitor_subwords``: units cut with the evaluated model's tokenizer);
2. the greedy answers (``generate_until``) under the positive context and the R frames.

Scoring requests come first, so a backend without them fails before any generation.

``--metadata`` knobs: ``KNOBS`` below (the common ones, e.g. ``relations``, plus the family's)
and the data source's (``belief_tasks.sources``: ``source``, ``fktc_path``). Each record names
its relation; every aggregation scores each relation alone, then averages relations without
weights (Table 4), so per-relation numbers are the same aggregations on one relation's records.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.matching import contains_answer
from belief_tasks.metrics import monitor as M
from belief_tasks.metrics.budgeted import monitor as budgeted_monitor
from belief_tasks.metrics.intervals import Units
from belief_tasks.options import COMMON, Knob, KnobError, Options, parse_options
from belief_tasks.prompts import monitor as P
from belief_tasks.schema import FactSet, SchemaError
from belief_tasks.tasks import monitor_subwords as S
from belief_tasks.tasks.base import BeliefTask, as_split, design_of, probe, select_facts, unpack, with_stderr

log = logging.getLogger(__name__)

MAX_FRAMES = 7  # FKTC: 7 frames, 6 for P264 and P276

# --------------------------------------------------------------------------- knobs

KNOBS: tuple[Knob, ...] = COMMON + (
    Knob("monitor_route", "str", "prefix", "how anchors are scored: loglikelihood on growing prefixes, or "
         "per_token_loglikelihood (hf-shared)", choices=S.ROUTES),
    Knob("answer_format", "str", P.DEFAULT_ANSWER_FORMAT, "qa (\"Question: {prompt}\\nAnswer:\"), bare (the "
         "question alone, as Table 1) or a string holding {prompt}"),
    Knob("monitor_alpha", "floats", M.DEFAULT_ALPHA, "a1,a2,a3 of eq. 3", minimum=0, length=3),
    Knob("only_correct_primary", "bool", False, "score MONITOR, PFD, IRD and the probabilities only on facts whose "
         "positive-context greedy answer is correct (the reference code's filter)"),
)


def answer_format(opts: Options) -> str:
    """The answer format's template (``answer_format`` resolved), refused with the knob's name."""
    try:
        return P.answer_format(opts.answer_format)
    except ValueError as e:
        raise KnobError("answer_format", str(e)) from None


# --------------------------------------------------------------------------- documents


def build_docs(fs: FactSet, opts: Options) -> list[dict]:
    """One doc per selected fact: its ids, object, accepted answers and anchor prompts."""
    fmt = answer_format(opts)
    docs = []
    selection = select_facts(fs, opts)
    for fact in selection:
        rel = fs.relations[fact.relation]
        if len(rel.frames) > MAX_FRAMES:
            raise SchemaError(f"{len(rel.frames)} frames; MONITOR reports at most {MAX_FRAMES}", row=rel.id, field="frames")
        docs.append({
            "fact_id": fact.id,
            "relation": fact.relation,
            "template_id": rel.frames[0].id,  # the base question
            "subject": fact.subject.label,
            "object": fact.object.label,
            "accepted": list(fact.object_expressions),
            "negatives": [n.label for n in fact.negatives],
            "anchors": [{"key": a.key, "kind": a.kind, "text": a.text} for a in P.anchor_prompts(fact, rel, fmt)],
            **selection.design(fact),
        })
    return docs


def _dataset(metadata: Mapping[str, Any]) -> dict:
    opts = parse_options(KNOBS, metadata)
    S.Codec(metadata)  # no tokenizer, no run: say so before any model time
    return as_split(build_docs(load_facts("fktc", metadata), opts))


@probe("belief_monitor", "fktc")
def fktc_dataset(**metadata):
    """``custom_dataset`` of ``belief_monitor``: FKTC (or the run's ``source``), relations from ``relations``."""
    return _dataset(metadata)


@probe("belief_monitor_sample", "sample")
def sample_dataset(**metadata):
    """``custom_dataset`` of ``belief_monitor_sample``: the bundled sample, whatever the run's source."""
    return _dataset({**metadata, "source": "sample"})


def doc_to_text(doc) -> str:
    return unpack(doc, "anchors")[0]["text"]


def doc_to_target(doc) -> str:
    return doc["object"]


# --------------------------------------------------------------------------- requests and records


def requests_of(pl: S.Plan, route: str, gen_kwargs: Mapping[str, Any]) -> list[tuple[str, tuple]]:
    """(request type, arguments) in order: the anchors' scoring first, then the greedy answers."""
    greedy = [("generate_until", (a["text"], dict(gen_kwargs))) for a in pl.anchors if a["kind"] != "negative"]
    return S.scoring_requests(pl, route) + greedy


class MonitorTask(BeliefTask):
    """Builds each fact's anchor and answer requests itself (several request types per doc)."""

    FAMILY = "monitor"
    KNOBS = KNOBS
    SCORES_ITSELF = True
    # a left cut removes an anchor's leading misleading context or part of its frame: another anchor
    WHOLE_CONTEXT = "its anchors' contexts (the misleading context placed before a frame)"

    def _plan(self, doc) -> S.Plan:
        """The fact's subword plan, computed once for its requests and its results."""
        if getattr(self, "_codec", None) is None:
            self._codec, self._plans = S.Codec(self.config.metadata), {}
        key = (doc["relation"], doc["fact_id"])
        if key not in self._plans:
            self._plans[key] = S.plan(doc, self._codec)
        return self._plans[key]

    def construct_requests(self, doc, ctx, **kwargs):
        if kwargs.get("apply_chat_template"):
            log.warning("%s: MONITOR builds its own prompts; the chat template is not applied", self.config.task)
        reqs = requests_of(self._plan(doc), self.options.monitor_route, self.config.generation_kwargs or {})
        return [self.instance(t, doc, args, i, kwargs) for i, (t, args) in enumerate(reqs)]

    def process_results(self, doc, results):
        record = make_record(doc, results, self.options, self._plan(doc))
        # a relation with R frames has no frame R (P264, P276: 6): its facts skip acc_frame_R.. rather
        # than count as wrong, and a run of 6-frame relations reports no acc_frame_6
        return {name: record for name in METRICS if name not in FRAME_METRICS[len(record["frame_ids"]):]}


def make_record(doc, results: list, opts: Options, pl: S.Plan) -> dict:
    """The fact's record (``belief_tasks.records.MonitorRecord``) from its results in request order."""
    route = opts.monitor_route
    n_score = S.n_scoring_requests(pl, route)
    probs = S.unit_probabilities(results[:n_score], pl, route)
    answered = [a for a in pl.anchors if a["kind"] != "negative"]
    answers = {a["key"]: P.first_line(r) for a, r in zip(answered, results[n_score:], strict=True)}
    accepted = unpack(doc, "accepted")
    kinds = [a["kind"] for a in pl.anchors]
    frame_ids = [a["key"] for a in pl.anchors if a["kind"] == "frame"]
    return {
        "relation": doc["relation"],
        "fact_id": doc["fact_id"],
        "template_id": doc["template_id"],
        "subject_form": "label",
        "object": doc["object"],
        "route": route,
        "units": pl.units,
        "n_tokens": pl.n_tokens[0],
        "primary": probs[kinds.index("positive")],
        "frame_ids": frame_ids,
        "frames": [p for p, k in zip(probs, kinds) if k == "frame"],
        "negative_labels": unpack(doc, "negatives"),
        "negatives": [p for p, k in zip(probs, kinds) if k == "negative"],
        "positive_answer": answers["positive"],
        "positive_correct": int(contains_answer(answers["positive"], accepted)),
        "answers": [answers[f] for f in frame_ids],
        "correct": [int(contains_answer(answers[f], accepted)) for f in frame_ids],
        "alpha": list(opts.monitor_alpha),
        "only_correct_primary": opts.only_correct_primary,
        **design_of(doc),
    }


# --------------------------------------------------------------------------- aggregations
# records -> per-fact rows (``_facts``) -> columns -> ``metrics.monitor``'s per-relation functions


@lru_cache(maxsize=1 << 17)
def _quantities(primary: tuple, frames: tuple, negatives: tuple) -> dict[str, float]:
    """``M.fact_quantities`` memoised on the anchors' values: every metric (19, each with a bootstrap)
    reads the same records, and recomputing them took 8 s per call on all of FKTC."""
    return M.fact_quantities(primary, frames, negatives)


def _facts(records: list[dict]) -> list[dict]:
    """Per-fact quantities of eqs. 1-3 (``M.fact_quantities``) with what the statistics group by."""
    return [{
        **_quantities(tuple(r["primary"]), tuple(map(tuple, r["frames"])), tuple(map(tuple, r["negatives"]))),
        "relation": r["relation"],
        "correct": r["correct"],
        "positive_correct": r["positive_correct"],
        "scored": (not r.get("only_correct_primary")) or bool(r["positive_correct"]),
        "alpha": tuple(r.get("alpha") or M.DEFAULT_ALPHA),
    } for r in records]


def budget_units(records: list[dict]) -> Units:
    """Per-fact columns of a run's records for its budgeted estimates (``metrics.budgeted.monitor``)."""
    facts = _facts(records)
    return budgeted_monitor.units([r["fact_id"] for r in records], [f["relation"] for f in facts], facts,
                                  [f["correct"] for f in facts], [f["positive_correct"] for f in facts],
                                  [f["scored"] for f in facts], _alpha(facts), MAX_FRAMES)


def _column(facts: list[dict], key: str, anchors: bool = False) -> tuple[list, list]:
    """(relations, values of ``key``); ``anchors``: only the facts the anchor metrics score."""
    rows = [f for f in facts if f["scored"]] if anchors else facts
    return [f["relation"] for f in rows], [f[key] for f in rows]


def _alpha(facts: list[dict]) -> tuple:
    alphas = {f["alpha"] for f in facts}
    if len(alphas) > 1:
        raise ValueError(f"records mix monitor_alpha settings {sorted(alphas)}")
    return alphas.pop() if alphas else M.DEFAULT_ALPHA


def _monitor(facts: list[dict]) -> float:
    scored = [f for f in facts if f["scored"]]
    pfd, ird, prob = ([f[key] for f in scored] for key in ("pfd", "ird", "primary_prob"))
    return M.monitor_over_relations([f["relation"] for f in scored], pfd, ird, prob, _alpha(scored))


def _mean_of(key: str, anchors: bool):
    return lambda facts: M.mean_over_relations(*_column(facts, key, anchors))


def _accuracy(which: str):
    return lambda facts: M.accuracy_over_relations(*_column(facts, "correct"), which)


def _relation_extreme(which: str):
    return lambda facts: M.accuracy_across_relations(*_column(facts, "correct"), which)


def _frame_accuracy(j: int):
    return lambda facts: M.frame_accuracy_over_relations(*_column(facts, "correct"), j)


def _aggregation(stat, name: str):
    """An aggregation over records with a bootstrap standard error over facts (100 resamples, seed 0)."""

    @with_stderr(lambda records: M.bootstrap_stderr(_facts(records), stat, iters=100, seed=0))
    def agg(records):
        return stat(_facts(records))

    agg.__name__ = agg.__qualname__ = f"agg_{name}"
    return agg


agg_monitor = _aggregation(_monitor, "monitor")
agg_pfd = _aggregation(_mean_of("pfd", True), "pfd")
agg_ird = _aggregation(_mean_of("ird", True), "ird")
agg_primary_prob = _aggregation(_mean_of("primary_prob", True), "primary_prob")
agg_frame_prob = _aggregation(_mean_of("frame_prob", True), "frame_prob")
agg_negative_prob = _aggregation(_mean_of("negative_prob", True), "negative_prob")
agg_acc_avg = _aggregation(_accuracy("avg"), "acc_avg")
agg_acc_max = _aggregation(_accuracy("max"), "acc_max")
agg_acc_min = _aggregation(_accuracy("min"), "acc_min")
agg_acc_positive = _aggregation(_mean_of("positive_correct", False), "acc_positive")
agg_acc_relation_max = _aggregation(_relation_extreme("max"), "acc_relation_max")
agg_acc_relation_min = _aggregation(_relation_extreme("min"), "acc_relation_min")

FRAME_METRICS = tuple(f"acc_frame_{j}" for j in range(MAX_FRAMES))
_FRAME_AGGS = tuple(_aggregation(_frame_accuracy(j), name) for j, name in enumerate(FRAME_METRICS))
agg_acc_frame_0, agg_acc_frame_1, agg_acc_frame_2, agg_acc_frame_3, agg_acc_frame_4, agg_acc_frame_5, agg_acc_frame_6 = _FRAME_AGGS

#: metric name -> (aggregation, higher is better); the YAMLs list the same names
METRICS = {
    "monitor": (agg_monitor, False),
    "pfd": (agg_pfd, False),
    "ird": (agg_ird, False),
    "primary_prob": (agg_primary_prob, True),
    "frame_prob": (agg_frame_prob, True),
    "negative_prob": (agg_negative_prob, True),
    "acc_avg": (agg_acc_avg, True),
    "acc_max": (agg_acc_max, True),
    "acc_min": (agg_acc_min, True),
    "acc_positive": (agg_acc_positive, True),
    "acc_relation_max": (agg_acc_relation_max, True),
    "acc_relation_min": (agg_acc_relation_min, True),
    **{name: (agg, True) for name, agg in zip(FRAME_METRICS, _FRAME_AGGS)},
}
