"""BELIEF-ICL harness glue: documents, requests, the task class, building one per-pair record.

One document = one subject-relation pair. Its prompts are the grid (template x subject
expression), templates first, and ``BeliefICLTask.construct_requests`` renders them from the
pair's ids: one greedy ``generate_until`` request per prompt and, when the pair is in the seeded
confidence subsample, K more ``generate_until`` requests that sample one of its prompts at
temperature 1 from the full vocabulary. Every metric is an aggregation over the per-pair records,
so N = 50,000 accuracy draws, consistency and coverage cost no extra model calls.

Why pairs (docs/scale.md): lm-eval keeps, per document, a logged sample of about 1.2 KB plus
three hashes and writes the process_results value under every metric name; at MyriadLAMA's
6.49 M prompts per context that per-document overhead alone would need ~12 GB. A pair's 263
prompts (all templates) share one document, one record of columns and one log line. The docs
carry ids only and the prompts are rendered for this rank's documents alone, so under
``accelerate launch`` a rank builds only its own share of prompts. Every metric is defined per
pair or per prompt, so the numbers do not depend on this layout.

``--metadata`` knobs: ``belief_tasks.families.BeliefICLOptions`` (the common ones plus the family's),
and the data source's (``belief_tasks.data.sources``). Records, their scoring and the metric table:
``belief_tasks.scoring.belief_icl``.

Cache note: lm-eval's ``--use_cache`` keys a request by its arguments, so K
identical sampling requests would share one cached answer. Sample ``i`` therefore
carries one extra stop string, ``<first stop>`` + ``<belief-sample i>``. It contains
the first stop string, so it can never end a generation earlier or cut it
differently (generation and truncation stop at the first stop string already):
the K requests are distinct to any cache yet sample exactly the same distribution,
on the stock ``hf`` backend and on any backend that honours ``until``.

Seeds: sample ``i`` also carries ``seed = request_seed(seed, pair, template, subject form,
style, i)`` (a signed 64-bit integer) in its generation kwargs, so its text depends on nothing else: not on the
batch size, the order of requests or the number of processes (Ovconf of a 2-process run
equals that of 1 process). vLLM's ``SamplingParams`` and OpenAI-style servers read the key
natively; on ``hf`` our hook pops it and seeds the draw (``belief_tasks.hooks.harness``);
``hf-shared`` seeds the sample's own generator with it.
"""

from __future__ import annotations

import json
import re
import sys
from copy import deepcopy
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.facts import seeding
from belief_tasks.facts.matching import contains_answer
from belief_tasks.facts.schema import Fact, SchemaError, Template, fact_key
from belief_tasks.families import BELIEF_ICL, BeliefICLOptions
from belief_tasks.metrics import belief as belief_metrics
from belief_tasks.prompts import belief as belief_prompts
from belief_tasks.scoring.belief_icl import METRICS, RECORD_METRIC
from belief_tasks.scoring.common import SameRecord
from belief_tasks.tasks.base import (
    STAMPED,
    BeliefTask,
    DocList,
    Probe,
    Selection,
    as_split,
    probe,
    record_design,
    select_facts,
    unpack,
)

SAMPLE_TAG = "<belief-sample {i}>"
#: sampling at temperature 1 over the full vocabulary (top_k=0 and top_p=1 switch both filters off)
SAMPLING = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
#: what ``doc_to_text`` returns: lm-eval wraps it (system instruction, chat template) once per
#: pair, and each prompt of the pair takes its place
PROMPT_SLOT = "\x00belief-prompt\x00"

OPTIONS = BeliefICLOptions


# --------------------------------------------------------------------------- the prompts of a run


@dataclass(frozen=True)
class PromptSet:
    """Everything needed to render any prompt of one task run, built once per process."""

    style: str
    context: str
    opts: BeliefICLOptions
    facts: tuple[Fact, ...]  # the evaluated pairs, in order
    by_id: Mapping[str, Fact]
    templates: Mapping[str, tuple[Template, ...]]  # relation -> the templates of this style
    by_relation: Mapping[str, list]  # demonstration pools: every fact, not only the evaluated ones
    pool: list
    sampled: frozenset  # pairs with a sampled prompt
    position: Mapping[str, tuple[int, int]]  # pair -> (relation, fact) index in the data, selection-free
    selection: Selection  # what select_facts chose (its budget design)

    def demonstrations(self, fact: Fact, template: Template) -> list[belief_prompts.Demonstration]:
        return belief_prompts.demonstrations(
            self.context,
            self.style,
            fact,
            template,
            facts_by_relation=self.by_relation,
            all_facts=self.pool,
            templates=self.templates,
            seed=self.opts.seed,
        )

    def render(self, fact: Fact, as_turns: bool = False) -> list:
        """The pair's prompt texts templates first (or, ``as_turns``, each as chat turns:
        ``belief_prompts.chat_turns``); demonstrations are drawn once per template (every subject expression of a
        pair under one template sees the same ones)."""
        build = belief_prompts.chat_turns if as_turns else belief_prompts.render
        out = []
        for template in self.templates[fact.relation]:
            demos = self.demonstrations(fact, template)
            out += [
                build(self.style, demos, belief_prompts.query(template, s, self.style))
                for s in fact.subject.expressions
            ]
        return out

    def sampled_prompt(self, fact: Fact) -> int | None:
        """Index (in ``render`` order) of the pair's sampled prompt, seeded per style; None when not sampled."""
        if fact.id not in self.sampled:
            return None
        n = len(self.templates[fact.relation]) * len(fact.subject.expressions)
        return seeding.choice(range(n), self.opts.seed, "belief_icl", "confidence", self.style, fact.id)


#: (style, context, settings) -> (the fact set it was built from, PromptSet): custom_dataset and
#: construct_requests of one task share one; a reloaded fact set (another source) builds anew
_prompt_sets: dict = {}


def prompt_set(style: str, context: str, opts: BeliefICLOptions) -> PromptSet:
    """The run's prompts, from its parsed knobs (``opts``; the data source from ``opts.metadata``)."""
    fs = load_facts("myriadlama", opts.metadata)  # cached per source by the loaders
    # what a task stamps into its metadata (the draw's summary, say) changes no prompt
    settings = {k: v for k, v in opts.metadata.items() if k not in STAMPED}
    key = (style, context, json.dumps(settings, sort_keys=True, default=str))
    hit = _prompt_sets.get(key)
    if hit is None or hit[0] is not fs:
        if len(_prompt_sets) >= 16:
            _prompt_sets.clear()
        _prompt_sets[key] = (fs, _prompt_set(style, context, opts, fs))
    return _prompt_sets[key][1]


def _prompt_set(style: str, context: str, opts: BeliefICLOptions, fs) -> PromptSet:
    manual_only = (opts.mp_templates if style == "mp" else opts.qa_templates) == "manual"
    templates = {rid: belief_prompts.templates_for(rel, style, manual_only) for rid, rel in fs.relations.items()}
    usable = {rid for rid, ts in templates.items() if ts}
    selection = select_facts(fs, opts)
    facts = tuple(f for f in selection if f.relation in usable)
    if not facts:
        raise SchemaError(
            f"no facts with {style.upper()} templates in the selected relations", file=fs.source, field="templates"
        )
    by_relation: dict[str, list] = {}
    for f in fs.facts:  # demonstrations come from every fact, not only the evaluated ones
        if f.relation in usable:
            by_relation.setdefault(f.relation, []).append(f)
    pool = [f for rid in by_relation for f in by_relation[rid]]
    # drawn from the facts a run could evaluate, so a budgeted run samples the same pairs as the full run
    population = [f.id for f in selection.population if f.relation in usable]
    sampled = frozenset(
        seeding.sample(population, opts.confidence_prompts, opts.seed, "belief_icl", "confidence")
        if opts.confidence_samples
        else ()
    )
    return PromptSet(
        style,
        context,
        opts,
        facts,
        {f.id: f for f in facts},
        templates,
        by_relation,
        pool,
        sampled,
        data_positions(fs),
        selection,
    )


def data_positions(fs) -> dict[str, tuple[int, int]]:
    """Each fact's (relation index, index among its relation's facts) in the data: the order of a
    run's documents, whatever relations or facts a run selects."""
    relation = {rid: i for i, rid in enumerate(fs.relations)}
    seen: dict[str, int] = {}
    out = {}
    for f in fs.facts:
        out[f.id] = (relation[f.relation], seen.get(f.relation, 0))
        seen[f.relation] = out[f.id][1] + 1
    return out


# --------------------------------------------------------------------------- documents


def build_docs(style: str, context: str, opts: BeliefICLOptions) -> DocList:
    """One document per selected pair: its ids, the ids of its prompt grid, what scoring needs; with the
    budget's draw (``DocList.draw``)."""
    ps = prompt_set(style, context, opts)
    opts = ps.opts
    docs = []
    for fact in ps.facts:
        sampled = ps.sampled_prompt(fact)
        docs.append(
            {
                "fact_id": fact.id,
                "relation": fact.relation,
                "fact_key": fact_key(fact).as_record(),  # BELIEF's datasets use Wikidata relation ids
                "style": style,
                "context": context,
                "templates": [t.id for t in ps.templates[fact.relation]],
                "subjects": list(fact.subject.expressions),
                "target": fact.object.label,
                "objects": list(fact.object_expressions),
                "sampled": sampled,
                "n_samples": opts.confidence_samples if sampled is not None else 0,
                "seed": opts.seed,
                "draws": opts.accuracy_draws,
                "bins": opts.calibration_bins,
                "order": list(ps.position[fact.id]),
                **ps.selection.design(fact),
            }
        )
    return DocList(docs, ps.selection.draw)


def prompt_ids(doc: Mapping[str, Any], j: int) -> dict:
    """The ids of prompt ``j`` of a pair document (grid order: templates first)."""
    subjects = unpack(doc, "subjects")
    return {
        "seed": doc["seed"],
        "fact_id": doc["fact_id"],
        "style": doc["style"],
        "template_id": unpack(doc, "templates")[j // len(subjects)],
        "subject_form": subjects[j % len(subjects)],
    }


def prompts_of(doc: Mapping[str, Any], opts: BeliefICLOptions) -> list[dict]:
    """A pair document's prompts, one dict each (ids, text, demonstration ids, samples asked):
    what the model is sent, for inspection, tests and scripts."""
    ps = prompt_set(doc["style"], doc["context"], opts)
    fact = ps.by_id[doc["fact_id"]]
    demo_ids = [[d.fact_id for d in ps.demonstrations(fact, t)] for t in ps.templates[fact.relation]]
    n = len(fact.subject.expressions)
    return [
        {
            **prompt_ids(doc, j),
            "prompt": text,
            "demo_ids": demo_ids[j // n],
            "n_samples": doc["n_samples"] if j == doc["sampled"] else 0,
        }
        for j, text in enumerate(ps.render(fact))
    ]


def prompt_slot(doc: Mapping[str, Any]) -> str:
    """``doc_to_text``: the slot each of the pair's prompts fills (see ``PROMPT_SLOT``)."""
    return PROMPT_SLOT


def _dataset(style: str, context: str) -> Probe:
    """The ``custom_dataset`` function of ``belief_<style>_<context>``."""

    def dataset(opts: BeliefICLOptions):
        return as_split(build_docs(style, context, opts))

    return probe(f"belief_{style}_{context}", "myriadlama")(dataset)


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
    until = (until,) if isinstance(until, str) else tuple(until)
    kwargs = {k: v for k, v in greedy.items() if k not in SAMPLING and k not in ("until", "seed")}
    kwargs = {**kwargs, **SAMPLING, "until": _sample_stops(until, i)}
    if seed is not None:
        kwargs["seed"] = seed
    return kwargs


@lru_cache(maxsize=1024)
def _sample_stops(until: tuple, i: int) -> list:
    """Sample ``i``'s stop strings, one list shared by every prompt's sample ``i`` (a million
    samples at full scale): backends copy generation kwargs before use (lm-eval's
    ``normalize_gen_kwargs`` deep-copies), so it is never changed."""
    return [*until, until[0] + SAMPLE_TAG.format(i=i)]


def sample_seed(doc: Mapping[str, Any], i: int) -> int:
    """Sample ``i``'s seed: from the run's seed and the prompt's ids (``prompt_ids``), never from
    its rank or batch; below 2**63, as every engine takes it (``seeding.request_seed``)."""
    return seeding.request_seed(
        int(doc["seed"]),
        "belief_icl",
        "sample",
        doc["fact_id"],
        doc["template_id"],
        doc["subject_form"],
        doc["style"],
        i,
    )


class BeliefICLTask(BeliefTask[BeliefICLOptions]):
    """A ``generate_until`` task over pair documents: one greedy request per prompt, K sampled
    ones after the greedy request of the pair's sampled prompt (instances ordered by ``idx``)."""

    FAMILY = BELIEF_ICL.name
    OPTIONS = OPTIONS
    WHOLE_CONTEXT = "its few-shot context and prompt"

    _multiturn: tuple | None = None  # (chat template, system instruction) under --fewshot_as_multiturn

    def fewshot_context(
        self,
        doc,
        num_fewshot,
        system_instruction=None,
        apply_chat_template=False,
        fewshot_as_multiturn=False,
        chat_template=None,
        gen_prefix=None,
    ):
        """lm-eval's context (one slot for the prompt); with ``--apply_chat_template --fewshot_as_multiturn``
        the demonstrations become turns instead (``construct_requests``, ``belief_prompts.chat_turns``)."""
        multiturn = apply_chat_template and fewshot_as_multiturn and chat_template is not None
        self._multiturn = (chat_template, system_instruction) if multiturn else None
        return super().fewshot_context(
            doc, num_fewshot, system_instruction, apply_chat_template, fewshot_as_multiturn, chat_template, gen_prefix
        )

    def _texts(self, ps: PromptSet, fact: Fact, ctx: str) -> list[str]:
        if self._multiturn is not None:
            chat_template, system = self._multiturn
            head = [{"role": "system", "content": system}] if system else []
            return [chat_template(head + turns) for turns in ps.render(fact, as_turns=True)]
        return [ctx.replace(PROMPT_SLOT, prompt) for prompt in ps.render(fact)]

    def construct_requests(self, doc: dict, ctx: str, **kwargs) -> list:
        if not isinstance(ctx, str) or ctx.count(PROMPT_SLOT) != 1:
            raise ValueError(
                f"{self.config.task}: the context lm-eval built does not hold the prompt slot once "
                "(doc_to_text must be utils.prompt_slot; a chat template must keep the user text)"
            )
        ps = prompt_set(doc["style"], doc["context"], self.options)
        greedy = deepcopy(self.config.generation_kwargs)  # one dict for the pair's greedy requests (backends copy it)
        out: list = []
        for j, text in enumerate(self._texts(ps, ps.by_id[doc["fact_id"]], ctx)):
            out.append(self.instance("generate_until", doc, (text, greedy), len(out), kwargs))
            if j == doc["sampled"]:
                ids = prompt_ids(doc, j)
                for i in range(int(doc["n_samples"])):
                    sampled = sampling_kwargs(greedy, i, sample_seed(ids, i))
                    out.append(self.instance("generate_until", doc, (text, sampled), len(out), kwargs))
        return out


def process_results(doc: dict, results: list) -> dict:
    """``results``: one greedy answer per prompt, the K sampled ones after the sampled prompt's."""
    j, k = doc["sampled"], int(doc["n_samples"])
    if j is None or not k:
        greedy, samples = list(results), []
    else:
        greedy, samples = results[: j + 1] + results[j + 1 + k :], results[j + 1 : j + 1 + k]
    record = make_record(doc, greedy, samples)
    return {name: record if name == RECORD_METRIC else SameRecord(record, RECORD_METRIC) for name in METRICS}


def make_record(doc: Mapping[str, Any], greedy: list[str], samples: list[str]) -> dict:
    """The per-pair record: ids, one extracted answer and correctness per prompt (grid order),
    and the sampled prompt's confidence. Raw generations stay in the sample's ``resps``."""
    objects = unpack(doc, "objects")
    # a pair's prompts repeat a few answers: extract and judge each distinct text once
    extracted = {g: extract_answer(g) for g in dict.fromkeys(greedy)}
    answers = [extracted[g] for g in greedy]
    judged = {a: bool(contains_answer(a, objects)) for a in dict.fromkeys(answers)}
    # template ids repeat in every pair of a relation: one string each, not one per record
    templates, subjects = [sys.intern(t) for t in unpack(doc, "templates")], unpack(doc, "subjects")
    if len(answers) != len(templates) * len(subjects):
        raise ValueError(
            f"pair {doc['fact_id']}: {len(answers)} answers for {len(templates)} templates x "
            f"{len(subjects)} subject expressions"
        )
    j = doc["sampled"] if samples else None
    return {
        "fact_id": doc["fact_id"],
        "relation": doc["relation"],
        "fact_key": unpack(doc, "fact_key"),
        "style": doc["style"],
        "context": doc["context"],
        "templates": templates,
        "subjects": subjects,
        "objects": objects,
        "answers": answers,
        "correct": [judged[a] for a in answers],
        "sampled": j,
        "confidence": (
            belief_metrics.sampled_confidence(answers[j], [extract_answer(s) for s in samples])
            if samples and j is not None
            else None
        ),
        "n_samples": len(samples),
        "seed": int(doc["seed"]),
        "draws": int(doc["draws"]),
        "bins": int(doc["bins"]),
        "order": unpack(doc, "order") if doc.get("order") is not None else None,
        **record_design(doc),
    }
