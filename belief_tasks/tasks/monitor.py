"""MONITOR harness glue (``belief_monitor``, ``belief_monitor_sample``): documents, requests, the task
class, building one per-fact record.

One document per fact. ``MonitorTask.construct_requests`` sends, in this order:

1. the anchors: the gold object's per-subword probabilities under 1 positive context, R frames
   and M negative contexts (``belief_tasks.prompts.monitor``), by the route ``monitor_route``
   picks (``belief_tasks.tasks.monitor_subwords``: units cut with the evaluated model's tokenizer);
2. the greedy answers (``generate_until``) under the positive context and the R frames (``monitor_accuracy``
   ``frames`` or ``paper``);
3. with ``monitor_accuracy: paper``, the R x M greedy answers under every frame behind every negative context
   (section 4.3's average accuracy).

Scoring requests come first, so a backend without them fails before any generation. Each record
counts the requests and tokens of each group (``cost``), so a run measures what the paper's Table 8
compares: MONITOR's anchors against the R x M accuracy generations.

``--metadata`` knobs: ``belief_tasks.families.MonitorOptions`` (the common ones, e.g. ``relations``,
plus the family's) and the data source's (``belief_tasks.data.sources``: ``source``, ``fktc_path``).
Records, their scoring and the metric table: ``belief_tasks.scoring.monitor``.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.facts.matching import contains_answer, eval_py_exact
from belief_tasks.facts.schema import FactSet, SchemaError, fact_key
from belief_tasks.families import MONITOR, MonitorOptions
from belief_tasks.options import KnobError
from belief_tasks.prompts import monitor as monitor_prompts
from belief_tasks.scoring.monitor import MAX_FRAMES, metrics_of
from belief_tasks.tasks import monitor_subwords
from belief_tasks.tasks.base import BeliefTask, DocList, as_split, probe, record_design, select_facts, unpack

log = logging.getLogger(__name__)

OPTIONS = MonitorOptions


def check_options(opts: MonitorOptions) -> None:
    """Knob combinations that cannot run, refused before any model time."""
    if opts.monitor_accuracy == "none" and opts.only_correct_primary:
        raise KnobError(
            "only_correct_primary",
            "needs the positive-context greedy answers, which monitor_accuracy: none "
            "does not ask for (use monitor_accuracy: frames or paper)",
        )
    if opts.monitor_accuracy == "none" and opts.monitor_match != "contains":
        raise KnobError(
            "monitor_match",
            "grades greedy answers, which monitor_accuracy: none does not ask for "
            "(use monitor_accuracy: frames or paper)",
        )


def answer_format(opts: MonitorOptions) -> str:
    """The answer format's template (``answer_format`` resolved), refused with the knob's name."""
    try:
        return monitor_prompts.answer_format(opts.answer_format)
    except ValueError as e:
        raise KnobError("answer_format", str(e)) from None


# --------------------------------------------------------------------------- documents


def build_docs(fs: FactSet, opts: MonitorOptions) -> DocList:
    """One doc per selected fact: its ids, object, accepted answers and anchor prompts; with the selection's draw
    (``DocList.draw``)."""
    fmt = answer_format(opts)
    docs = []
    selection = select_facts(fs, opts)
    for fact in selection:
        rel = fs.relations[fact.relation]
        if len(rel.frames) > MAX_FRAMES:
            raise SchemaError(
                f"{len(rel.frames)} frames; MONITOR reports at most {MAX_FRAMES}", row=rel.id, field="frames"
            )
        docs.append(
            {
                "fact_id": fact.id,
                "relation": fact.relation,
                "fact_key": fact_key(fact, rel).as_record(),
                "template_id": rel.frames[0].id,  # the base question
                "subject": fact.subject.label,
                "object": fact.object.label,
                "accepted": list(fact.object_expressions),
                "negatives": [n.label for n in fact.negatives],
                "anchors": [
                    {"key": a.key, "kind": a.kind, "text": a.text}
                    for a in monitor_prompts.anchor_prompts(fact, rel, fmt)
                ],
                **(
                    {
                        "interference": [
                            {"frame": q.frame, "negative": q.negative, "text": q.text}
                            for q in monitor_prompts.interference_prompts(fact, rel, fmt)
                        ]
                    }
                    if opts.monitor_accuracy == "paper"
                    else {}
                ),
                **selection.design(fact),
            }
        )
    return DocList(docs, selection.draw)


def _dataset(opts: MonitorOptions, metadata: Mapping[str, Any]) -> dict:
    check_options(opts)
    monitor_subwords.Codec(metadata)  # no tokenizer, no run: say so before any model time
    return as_split(build_docs(load_facts("fktc", metadata), opts))


@probe("belief_monitor", "fktc")
def fktc_dataset(opts: MonitorOptions):
    """``custom_dataset`` of ``belief_monitor``: FKTC (or the run's ``source``), relations from ``relations``."""
    return _dataset(opts, opts.metadata)


@probe("belief_monitor_sample", "sample")
def sample_dataset(opts: MonitorOptions):
    """``custom_dataset`` of ``belief_monitor_sample``: the bundled sample, whatever the run's source."""
    return _dataset(opts, {**opts.metadata, "source": "sample"})


def doc_to_text(doc) -> str:
    return unpack(doc, "anchors")[0]["text"]


def doc_to_target(doc) -> str:
    return doc["object"]


# --------------------------------------------------------------------------- requests and records


def answered_anchors(pl: monitor_subwords.Plan, mode: str) -> list[dict]:
    """The anchors whose greedy answer is asked for: the positive context and the R frames (not with ``none``)."""
    return [] if mode == "none" else [a for a in pl.anchors if a["kind"] != "negative"]


def interference_of(doc, mode: str) -> list[dict]:
    """The fact's R x M frame-interference prompts (``monitor_accuracy: paper``), frame-major."""
    if mode != "paper":
        return []
    if doc.get("interference") in (None, ""):
        raise RuntimeError(f"{doc['fact_id']}: monitor_accuracy is paper but the doc has no interference prompts")
    return unpack(doc, "interference")


def requests_of(
    pl: monitor_subwords.Plan, doc, opts: MonitorOptions, gen_kwargs: Mapping[str, Any]
) -> list[tuple[str, tuple]]:
    """(request type, arguments) in order: the anchors' scoring first, then the greedy answers under the
    positive context and the frames, then the R x M frame-interference answers."""
    mode = opts.monitor_accuracy
    texts = [a["text"] for a in answered_anchors(pl, mode)] + [q["text"] for q in interference_of(doc, mode)]
    return monitor_subwords.scoring_requests(pl, opts.monitor_route) + [
        ("generate_until", (t, dict(gen_kwargs))) for t in texts
    ]


class MonitorTask(BeliefTask[MonitorOptions]):
    """Builds each fact's anchor and answer requests itself (several request types per doc)."""

    FAMILY = MONITOR.name
    OPTIONS = OPTIONS
    SCORES_ITSELF = True
    # a left cut removes an anchor's leading misleading context or part of its frame: another anchor
    WHOLE_CONTEXT = "its anchors' contexts (the misleading context placed before a frame)"

    def _plan(self, doc) -> monitor_subwords.Plan:
        """The fact's subword plan, computed once for its requests and its results."""
        if getattr(self, "_codec", None) is None:
            self._codec = monitor_subwords.Codec(self.config.metadata)
            self._plans: dict = {}
        key = (doc["relation"], doc["fact_id"])
        if key not in self._plans:
            self._plans[key] = monitor_subwords.plan(doc, self._codec)
        return self._plans[key]

    def construct_requests(self, doc, ctx, **kwargs):
        if kwargs.get("apply_chat_template"):
            log.warning("%s: MONITOR builds its own prompts; the chat template is not applied", self.config.task)
        reqs = requests_of(self._plan(doc), doc, self.options, self.config.generation_kwargs or {})
        return [self.instance(t, doc, args, i, kwargs) for i, (t, args) in enumerate(reqs)]

    def score_doc(self, doc, results):
        record = make_record(doc, results, self.options, self._plan(doc), self._codec)
        return {name: record for name in metrics_of(record)}


def make_record(
    doc, results: list, opts: MonitorOptions, pl: monitor_subwords.Plan, codec: monitor_subwords.Codec
) -> dict:
    """The fact's record (``belief_tasks.scoring.monitor.MonitorRecord``) from its results in request order."""
    route, mode = opts.monitor_route, opts.monitor_accuracy
    n_score = monitor_subwords.n_scoring_requests(pl, route)
    probs = monitor_subwords.unit_probabilities(results[:n_score], pl, route)
    kinds = [a["kind"] for a in pl.anchors]
    frame_ids = [a["key"] for a in pl.anchors if a["kind"] == "frame"]
    answers = answer_fields(
        doc, results[n_score:], answered_anchors(pl, mode), interference_of(doc, mode), frame_ids, opts.monitor_match
    )
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
        **answers,
        "alpha": list(opts.monitor_alpha),
        "only_correct_primary": opts.only_correct_primary,
        "accuracy": mode,
        "match": opts.monitor_match,
        "cost": request_cost(
            codec, pl, route, results[n_score:], answered_anchors(pl, mode), interference_of(doc, mode)
        ),
        **record_design(doc),
    }


def answer_fields(
    doc, generated: list, answered: list[dict], grid: list[dict], frame_ids: list[str], match: str = "contains"
) -> dict:
    """The greedy answers' record fields: under the positive context and each frame (``None`` / [] when
    not asked), and the R x M grid ``interference_answers[j][m]`` (frame j behind negative m; [] unless paper).
    ``match`` (the ``monitor_match`` knob) decides which answers are right: ``contains`` the object or an alias,
    or ``exact``, the reference ``eval.py``'s test against the object label (``matching.eval_py_exact``)."""
    if len(generated) != len(answered) + len(grid):
        raise RuntimeError(
            f"{doc['fact_id']}: {len(generated)} greedy answers for {len(answered) + len(grid)} requests"
        )
    accepted = unpack(doc, "accepted")

    def right(answer: str) -> bool:
        return eval_py_exact(answer, doc["object"]) if match == "exact" else contains_answer(answer, accepted)

    answers = {a["key"]: monitor_prompts.first_line(r) for a, r in zip(answered, generated)}
    rows: dict[str, list[str]] = {f: [] for f in frame_ids} if grid else {}
    for q, r in zip(grid, generated[len(answered) :]):
        rows[q["frame"]].append(monitor_prompts.first_line(r))
    positive = answers.get("positive")
    return {
        "positive_answer": positive,
        "positive_correct": None if positive is None else int(right(positive)),
        "answers": [answers[f] for f in frame_ids] if answers else [],
        "correct": [int(right(answers[f])) for f in frame_ids] if answers else [],
        "interference_answers": list(rows.values()),
        "interference_correct": [[int(right(a)) for a in row] for row in rows.values()],
    }


def request_cost(
    codec: monitor_subwords.Codec,
    pl: monitor_subwords.Plan,
    route: str,
    generated: list,
    answered: list[dict],
    grid: list[dict],
) -> dict[str, dict[str, int]]:
    """Requests and tokens the fact cost, per group: ``anchors`` (MONITOR's R + 1 + M scored anchors),
    ``answers`` (greedy answers under the positive context and the R frames), ``interference`` (the R x M
    accuracy generations). Tokens: the prompt (and scored answer) tokens each request holds, plus the
    generated tokens of greedy requests (``monitor_subwords.Codec.generation_tokens``)."""
    gen_answers, gen_grid = generated[: len(answered)], generated[len(answered) :]
    return {
        "anchors": {
            "requests": monitor_subwords.n_scoring_requests(pl, route),
            "tokens": monitor_subwords.scoring_tokens(pl, route),
        },
        "answers": {
            "requests": len(answered),
            "tokens": codec.generation_tokens([a["text"] for a in answered], gen_answers),
        },
        "interference": {"requests": len(grid), "tokens": codec.generation_tokens([q["text"] for q in grid], gen_grid)},
    }
