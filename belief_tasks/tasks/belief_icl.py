"""BELIEF-ICL harness glue: documents, requests, per-doc records, aggregations.

One document = one prompt: (subject-relation pair, template, subject expression).
``BeliefICLTask`` sends each document one greedy ``generate_until`` request and,
for the documents of a seeded subsample of pairs (one prompt per pair), K more
``generate_until`` requests that sample at temperature 1 from the full vocabulary.
Every metric is then an aggregation over the per-doc records, so N = 50,000
accuracy draws, consistency and coverage cost no extra model calls.

``--metadata`` knobs: ``KNOBS`` below (the common ones plus the family's), and the data
source's (``belief_tasks.sources``).

Cache note: lm-eval's ``--use_cache`` keys a request by its arguments, so K
identical sampling requests would share one cached answer. Sample ``i`` therefore
carries one extra stop string, ``<first stop>`` + ``<belief-sample i>``. It contains
the first stop string, so it can never end a generation earlier or cut it
differently (generation and truncation stop at the first stop string already):
the K requests are distinct to any cache yet sample exactly the same distribution,
on the stock ``hf`` backend and on any backend that honours ``until``.

Seeds: sample ``i`` also carries ``seed = derive_seed(seed, pair, template, subject form,
style, i)`` in its generation kwargs, so its text depends on nothing else: not on the
batch size, the order of requests or the number of processes (Ovconf of a 2-process run
equals that of 1 process). vLLM's ``SamplingParams`` and OpenAI-style servers read the key
natively; on ``hf`` our hook pops it and seeds the draw (``belief_tasks.harness``);
``hf-shared`` seeds the sample's own generator with it.
"""

from __future__ import annotations

import logging
import re
from copy import deepcopy
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from belief_tasks import seeding
from belief_tasks.data import load_facts
from belief_tasks.matching import contains_answer, word_count
from belief_tasks.metrics import belief as M
from belief_tasks.prompts import belief as P
from belief_tasks.options import COMMON, Knob, parse_options
from belief_tasks.schema import SchemaError
from belief_tasks.tasks.base import BeliefTask, as_split, select_facts, unpack, with_stderr

log = logging.getLogger("lm_eval.belief_icl")

SAMPLE_TAG = "<belief-sample {i}>"
#: sampling at temperature 1 over the full vocabulary (top_k=0 and top_p=1 switch both filters off)
SAMPLING = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}


# --------------------------------------------------------------------------- knobs

_TEMPLATE_SETS = ("manual", "all")
KNOBS: tuple[Knob, ...] = COMMON + (
    Knob("mp_templates", "str", "manual", "MP templates: the manual ones (the paper's choice for cost) or all",
         choices=_TEMPLATE_SETS),
    Knob("qa_templates", "str", "all", "QA templates: every question-style template, or the manual ones only",
         choices=_TEMPLATE_SETS),
    Knob("confidence_samples", "int", 100, "K sampled answers per sampled prompt, for Ovconf (0: none)", minimum=0),
    Knob("confidence_prompts", "int", 10_000, "pairs that get one sampled prompt each", minimum=0),
    Knob("accuracy_draws", "int", M.DEFAULT_DRAWS, "N draws of one prompt per pair for Acc@1 and its fluctuation",
         minimum=1),
    Knob("calibration_bins", "int", M.DEFAULT_BINS, "M equal-size bins of Ovconf", minimum=1),
)


# --------------------------------------------------------------------------- documents


def build_docs(style: str, context: str, metadata: Mapping[str, Any] | None) -> list[dict]:
    """Every prompt of the selected facts, with its demonstrations, as plain dicts."""
    opts = parse_options(KNOBS, metadata)
    fs = load_facts("myriadlama", metadata)
    manual_only = opts[f"{style}_templates"] == "manual"
    templates = {rid: P.templates_for(rel, style, manual_only) for rid, rel in fs.relations.items()}
    usable = {rid for rid, ts in templates.items() if ts}
    facts = [f for f in select_facts(fs, opts) if f.relation in usable]
    if not facts:
        raise SchemaError(f"no facts with {style.upper()} templates in the selected relations", file=fs.source, field="templates")
    by_relation: dict[str, list] = {}
    for f in fs.facts:  # demonstrations come from every fact, not only the evaluated ones
        if f.relation in usable:
            by_relation.setdefault(f.relation, []).append(f)
    pool = [f for rid in by_relation for f in by_relation[rid]]

    sampled = set(seeding.sample([f.id for f in facts], opts.confidence_prompts, opts.seed, "belief_icl", "confidence")) if opts.confidence_samples else set()
    docs = []
    for fact in facts:
        prompts = [(t, s) for t in templates[fact.relation] for s in fact.subject.expressions]
        chosen = seeding.choice(range(len(prompts)), opts.seed, "belief_icl", "confidence", style, fact.id) if fact.id in sampled else -1
        for i, (template, subject) in enumerate(prompts):
            demos = P.demonstrations(
                context, style, fact, template, facts_by_relation=by_relation, all_facts=pool,
                templates=templates, seed=opts.seed,
            )
            docs.append({
                "fact_id": fact.id,
                "relation": fact.relation,
                "template_id": template.id,
                "subject_form": subject,
                "prompt": P.render(style, demos, P.query(template, subject, style)),
                "target": fact.object.label,
                "objects": list(fact.object_expressions),
                "demo_ids": [d.fact_id for d in demos],
                "n_samples": opts.confidence_samples if i == chosen else 0,
                "style": style,
                "context": context,
                "seed": opts.seed,
                "draws": opts.accuracy_draws,
                "bins": opts.calibration_bins,
            })
    return docs


def _dataset(style: str, context: str):
    def dataset(**metadata):
        return as_split(build_docs(style, context, metadata))

    dataset.__name__ = dataset.__qualname__ = f"{style}_{context}"
    dataset.probe, dataset.dataset = f"belief_{style}_{context}", "myriadlama"
    dataset.__doc__ = f"custom_dataset of belief_{style}_{context}"
    return dataset


mp_zeroshot = _dataset("mp", "zeroshot")
mp_4random = _dataset("mp", "4random")
mp_4relation = _dataset("mp", "4relation")
mp_4template = _dataset("mp", "4template")
qa_zeroshot = _dataset("qa", "zeroshot")
qa_4random = _dataset("qa", "4random")
qa_4relation = _dataset("qa", "4relation")
qa_4template = _dataset("qa", "4template")


# --------------------------------------------------------------------------- generation


def extract_answer(text: str) -> str:
    """The answer in a generation: its first line, cut before a repeated ``Q:``,
    without a leading ``A:``, surrounding quotes or trailing periods."""
    line = (text or "").strip().split("\n")[0]
    line = re.split(r"\bQ:", line)[0].strip()
    line = re.sub(r"^A:\s*", "", line)
    quotes = " \t\"'`\u201c\u201d\u2018\u2019"
    line = line.strip(quotes).rstrip(".").strip(quotes).strip()
    return line


def sampling_kwargs(greedy: Mapping[str, Any], i: int, seed: int | None = None) -> dict:
    """The ``generate_until`` kwargs of sample ``i``: the greedy ones at temperature 1,
    full vocabulary, plus a redundant stop string that makes the request distinct and,
    given ``seed``, the request's own sampling seed (see the module docstring)."""
    until = greedy.get("until") or ["\n"]
    until = [until] if isinstance(until, str) else list(until)
    kwargs = {k: v for k, v in greedy.items() if k not in SAMPLING and k not in ("until", "seed")}
    kwargs = {**kwargs, **SAMPLING, "until": until + [until[0] + SAMPLE_TAG.format(i=i)]}
    if seed is not None:
        kwargs["seed"] = seed
    return kwargs


def sample_seed(doc: Mapping[str, Any], i: int) -> int:
    """Sample ``i``'s seed: from the run's seed and the prompt's ids, never from its rank or batch."""
    return seeding.derive_seed(int(doc["seed"]), "belief_icl", "sample", doc["fact_id"], doc["template_id"],
                               doc["subject_form"], doc["style"], i)


class BeliefICLTask(BeliefTask):
    """A ``generate_until`` task whose documents may ask for K extra sampled answers."""

    FAMILY = "belief_icl"
    KNOBS = KNOBS

    def construct_requests(self, doc: dict, ctx: str, **kwargs) -> list:
        greedy = deepcopy(self.config.generation_kwargs)
        requests = [self.instance("generate_until", doc, (ctx, greedy), 0, kwargs)]
        for i in range(int(doc["n_samples"])):
            sampled = sampling_kwargs(greedy, i, sample_seed(doc, i))
            requests.append(self.instance("generate_until", doc, (ctx, sampled), i + 1, kwargs))
        return requests


def process_results(doc: dict, results: list) -> dict:
    """``results``: the greedy answer, then the K sampled ones (instances ordered by idx)."""
    record = make_record(doc, results[0], results[1:])
    return {name: record for name in METRICS}


def make_record(doc: Mapping[str, Any], greedy: str, samples: list[str]) -> dict:
    """The per-doc record: ids, the greedy answer, correctness, 1-word flag, sampled confidence."""
    answer = extract_answer(greedy)
    objects = unpack(doc, "objects")
    return {
        "fact_id": doc["fact_id"],
        "relation": doc["relation"],
        "template_id": doc["template_id"],
        "subject_form": doc["subject_form"],
        "style": doc["style"],
        "context": doc["context"],
        "output": greedy,
        "answer": answer,
        "objects": objects,
        "correct": bool(contains_answer(answer, objects)),
        "one_word": word_count(answer) == 1,
        "confidence": M.sampled_confidence(answer, [extract_answer(s) for s in samples]) if samples else None,
        "n_samples": len(samples),
        "seed": int(doc["seed"]),
        "draws": int(doc["draws"]),
        "bins": int(doc["bins"]),
    }


# --------------------------------------------------------------------------- aggregations


def _columns(items: list[dict]) -> tuple:
    return (
        tuple(r["fact_id"] for r in items),
        tuple(r["relation"] for r in items),
        tuple(r["template_id"] for r in items),
        tuple(bool(r["correct"]) for r in items),
    )


@lru_cache(maxsize=8)
def _draws(columns: tuple, n_draws: int, seed: int):
    return M.accuracy_draws(*columns, n_draws=n_draws, seed=seeding.derive_seed(seed, "belief_icl", "accuracy_draws"))


def accuracy_values(items: list[dict]):
    """V_Acc@1: the N draws' accuracies (same records, same numbers)."""
    return _draws(_columns(items), int(items[0]["draws"]), int(items[0]["seed"]))


def _confidence(items: list[dict]):
    rows = [r for r in items if r.get("confidence") is not None]
    return [r["confidence"] for r in rows], [bool(r["correct"]) for r in rows]


@with_stderr(lambda items: M.accuracy_stderr(*_columns(items)))
def agg_acc(items: list[dict]) -> float:
    """Acc@1: mean of the N draws."""
    return float(accuracy_values(items).mean())


@with_stderr(None)
def agg_acc_range(items: list[dict]) -> float:
    return M.fluctuation(accuracy_values(items))[0]


@with_stderr(None)
def agg_acc_sd(items: list[dict]) -> float:
    return M.fluctuation(accuracy_values(items))[1]


@with_stderr(lambda items: M.consistency_stderr([r["fact_id"] for r in items], [r["answer"] for r in items]))
def agg_consist(items: list[dict]) -> float:
    return M.consistency([r["fact_id"] for r in items], [r["answer"] for r in items])


@with_stderr(lambda items: M.overconfidence_stderr(*_confidence(items)))
def agg_ovconf(items: list[dict]) -> float:
    conf, correct = _confidence(items)
    if not conf:
        return float("nan")
    bins = int(items[0]["bins"])
    for i, b in enumerate(M.calibration_bins(conf, correct, bins), start=1):
        log.info("belief %s/%s calibration bin %d/%d: n=%d confidence=%.4f acc=%.4f",
                 items[0]["style"], items[0]["context"], i, bins, b["size"], b["confidence"], b["accuracy"])
    return M.overconfidence(conf, correct, bins)


@with_stderr(lambda items: M.one_word_stderr([r["answer"] for r in items]))
def agg_one_word(items: list[dict]) -> float:
    return M.one_word_ratio([r["answer"] for r in items])


@with_stderr(lambda items: M.empty_answer_stderr([r["answer"] for r in items]))
def agg_empty_answer_rate(items: list[dict]) -> float:
    rate = M.empty_answer_rate([r["answer"] for r in items])
    if rate:
        log.warning("%s: %d of %d greedy answers are empty or punctuation only; they are scored wrong, not dropped",
                    items[0]["style"], round(rate * len(items)), len(items))
    return rate


def _coverage(key: str):
    @with_stderr(lambda items: M.coverage_stderr(*_columns(items))[key])
    def agg(items: list[dict]) -> float:
        return M.knowledge_coverage(*_columns(items))[key]

    agg.__name__ = agg.__qualname__ = f"agg_coverage_{key}"
    return agg


agg_coverage_average = _coverage("average")
agg_coverage_maximum = _coverage("maximum")
agg_coverage_oracle = _coverage("oracle")

#: metric name -> (aggregation, higher is better); the YAMLs list the same names
METRICS = {
    "acc": (agg_acc, True),
    "acc_range": (agg_acc_range, False),
    "acc_sd": (agg_acc_sd, False),
    "consist": (agg_consist, True),
    "ovconf": (agg_ovconf, False),
    "one_word_ratio": (agg_one_word, True),
    "empty_answer_rate": (agg_empty_answer_rate, False),
    "coverage_average": (agg_coverage_average, True),
    "coverage_maximum": (agg_coverage_maximum, True),
    "coverage_oracle": (agg_coverage_oracle, True),
}
