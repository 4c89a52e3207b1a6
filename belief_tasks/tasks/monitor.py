"""MONITOR harness glue (``belief_monitor``, ``belief_monitor_sample``): documents, requests, the task
class, building one per-fact record.

One document per fact. ``MonitorTask.construct_requests`` sends, in this order:

1. the anchors: the gold object's per-subword probabilities under 1 positive context, R frames
   and M negative contexts (``belief_tasks.prompts.monitor``), by the route ``monitor_route``
   picks (``belief_tasks.tasks.monitor_subwords``: units cut with the evaluated model's tokenizer);
2. the greedy answers (``generate_until``) under the positive context and the R frames.

Scoring requests come first, so a backend without them fails before any generation.

``--metadata`` knobs: ``belief_tasks.families.MONITOR_KNOBS`` (the common ones, e.g. ``relations``,
plus the family's) and the data source's (``belief_tasks.sources``: ``source``, ``fktc_path``).
Records, their scoring and the metric table: ``belief_tasks.scoring.monitor``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.families import MONITOR
from belief_tasks.matching import contains_answer
from belief_tasks.options import KnobError, Options, parse_options
from belief_tasks.prompts import monitor as P
from belief_tasks.schema import FactSet, SchemaError, fact_key
from belief_tasks.scoring.monitor import FRAME_METRICS, MAX_FRAMES, METRICS
from belief_tasks.tasks import monitor_subwords as S
from belief_tasks.tasks.base import BeliefTask, as_split, design_of, probe, select_facts, unpack

log = logging.getLogger(__name__)

KNOBS = MONITOR.knobs


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
            "fact_key": fact_key(fact, rel).as_record(),
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

    FAMILY = MONITOR.name
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
    """The fact's record (``belief_tasks.scoring.monitor.MonitorRecord``) from its results in request order."""
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
        "fact_key": unpack(doc, "fact_key"),
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
