"""BELIEF for encoders: ``belief_mlm_*`` harness tasks (BELIEF v3 sections 2 and 5.4).

* ``belief_mlm_<dataset>``: one doc per masked prompt (fact x statement template x
  subject expression), zero-shot. Each emits a ``mask_topk`` request (served by
  ``hf-mlm``) for the top of the mask distribution and the ranks of the fact's
  accepted object tokens. Prompts whose accepted objects are not a single token
  for the model's tokenizer are dropped before any model time; the counts are
  logged and reported as ``prompts_kept`` / ``prompts_dropped``.
* ``belief_mlm_bias_<dataset>``: one doc per (relation, template, content-free
  subject "N/A" / "" / "?"); the request asks for the probabilities of the
  relation's candidate objects; metrics ``bias_single`` and ``bias_multi``.

The tokenizer comes from the model args (``pretrained=``, ``tokenizer=``), which
lm-eval's CLI merges into ``--metadata`` and so into ``custom_dataset``'s kwargs
(from Python, put ``pretrained`` in the TaskManager's metadata).

``--metadata`` knobs besides the common ``source``, ``seed``, ``relations`` and
``max_facts_per_relation``: ``accuracy_draws`` (N draws for Acc@K and its
fluctuation, default 50,000 as in the paper).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.api.task import ConfigurableTask

from belief_tasks import seeding
from belief_tasks.data import load_facts
from belief_tasks.metrics import belief as B
from belief_tasks.metrics import belief_mlm as M
from belief_tasks.prompts.belief_mlm import content_free_prompts, fact_prompts, masked_prompt, mp_templates
from belief_tasks.schema import Fact, Relation
from belief_tasks.options import COMMON, parse_options
from belief_tasks.tasks.base import as_split, select_facts, unpack, with_stderr

log = logging.getLogger(__name__)

REQUEST_TYPE = "mask_topk"
TOP_K = 10  # Acc@10 needs ranks only; the top 10 tokens are logged for reading

PROMPT_METRICS = ("acc@1", "acc@10", "mrr", "acc@1_range", "acc@1_sd", "consist", "overconf@1", "overconf@10",
                  "prompts_kept", "prompts_dropped")
BIAS_METRICS = ("bias_single", "bias_multi")


# ------------------------------------------------------------------- tokenizer


@lru_cache(maxsize=4)
def _load_tokenizer(name: str, revision: str | None, trust_remote_code: bool):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name, revision=revision or "main", trust_remote_code=trust_remote_code,
                                         use_fast=True)


def tokenizer_from(metadata: dict):
    """The evaluated model's tokenizer, from the model args lm-eval merged into the metadata."""
    name = metadata.get("tokenizer") or metadata.get("pretrained")
    if not name:
        raise ValueError(
            "belief_mlm tasks filter prompts to single-token objects and need the model's tokenizer: run with "
            "--model hf-mlm --model_args pretrained=<masked LM> (the CLI passes it on), or add "
            '{"pretrained": "<path or id>"} to --metadata / the TaskManager metadata when calling lm-eval from Python'
        )
    tok = _load_tokenizer(str(name), metadata.get("revision"), str(metadata.get("trust_remote_code", False)).strip().lower() in ("1", "true", "yes", "on"))
    if tok.mask_token is None:
        raise ValueError(f"tokenizer {name} has no mask token: belief_mlm tasks need a masked LM")
    return tok


# ------------------------------------------------------------------------ docs


def _accepted_tokens(tok, relation: Relation, fact: Fact, cache: dict) -> dict[str, list[str]]:
    """template id -> the fact's accepted object expressions that are one token at that template's mask."""
    from belief_tasks.backends.mlm import object_token_id

    out = {}
    for template in mp_templates(relation):
        probe = masked_prompt(template, fact.subject.label)
        keep = []
        for expr in fact.object_expressions:
            key = (template.id, expr)
            if key not in cache:
                cache[key] = object_token_id(tok, probe, expr)
            if cache[key] is not None:
                keep.append(expr)
        out[template.id] = keep
    return out


def prompt_docs(dataset: str, metadata: dict) -> tuple[list[dict], dict[str, dict[str, int]]]:
    """Docs for ``belief_mlm_<dataset>`` and per-relation counts {relation: {kept, dropped, facts_kept, facts_dropped}}."""
    opts = parse_options(COMMON, metadata)
    tok = tokenizer_from(metadata)
    fs = load_facts(dataset, metadata)
    facts = select_facts(fs, opts)
    draws = int(metadata.get("accuracy_draws", B.DEFAULT_DRAWS))
    cache: dict = {}
    docs, counts = [], {}
    for fact in facts:
        rel = fs.relations[fact.relation]
        c = counts.setdefault(rel.id, {"kept": 0, "dropped": 0, "facts_kept": 0, "facts_dropped": 0})
        accepted = _accepted_tokens(tok, rel, fact, cache)
        n_before = len(docs)
        for p in fact_prompts(fact, rel):
            if not accepted[p.template_id]:
                c["dropped"] += 1
                continue
            c["kept"] += 1
            docs.append({
                "relation": p.relation, "fact_id": p.fact_id, "template_id": p.template_id,
                "subject_form": p.subject_form, "subject": p.subject, "prompt": p.text,
                "object": fact.object.label, "accepted": accepted[p.template_id],
                "seed": opts.seed, "draws": draws,
            })
        c["facts_kept" if len(docs) > n_before else "facts_dropped"] += 1
    for doc in docs:
        doc["relation_kept"], doc["relation_dropped"] = counts[doc["relation"]]["kept"], counts[doc["relation"]]["dropped"]
    kept, dropped = sum(c["kept"] for c in counts.values()), sum(c["dropped"] for c in counts.values())
    log.warning("belief_mlm_%s: kept %d prompts, dropped %d whose objects are not single tokens for %s "
                "(facts kept %d, dropped %d)", dataset, kept, dropped, tok.name_or_path,
                sum(c["facts_kept"] for c in counts.values()), sum(c["facts_dropped"] for c in counts.values()))
    return docs, counts


def bias_docs(dataset: str, metadata: dict) -> list[dict]:
    """Content-free prompts with the relation's single-token candidate objects (distinct tokens)."""
    from belief_tasks.backends.mlm import object_token_id

    opts = parse_options(COMMON, metadata)
    tok = tokenizer_from(metadata)
    fs = load_facts(dataset, metadata)
    docs = []
    for rid, rel in fs.relations.items():
        if opts.relations is not None and rid not in opts.relations:
            continue
        labels = [e.label for e in rel.answer_space] or sorted({o.label for f in fs.facts_of(rid) for o in f.objects})
        for p in content_free_prompts(rel):
            by_token: dict[int, str] = {}
            for label in labels:
                tid = object_token_id(tok, p.text, label)
                if tid is not None:
                    by_token.setdefault(tid, label)  # first label per token: one candidate per token
            if len(by_token) < 2:
                continue
            docs.append({"relation": rid, "fact_id": None, "template_id": p.template_id, "subject_form": p.subject_form,
                         "subject": p.subject, "prompt": p.text, "object": "", "candidates": list(by_token.values()),
                         "n_answer_space": len(labels)})
    if not docs:
        raise ValueError(f"belief_mlm_bias_{dataset}: no template has two single-token candidate objects for "
                         f"{tok.name_or_path}")
    return docs


def myriadlama_docs(**metadata: Any):
    return as_split(prompt_docs("myriadlama", metadata)[0])


def bear_docs(**metadata: Any):
    return as_split(prompt_docs("bear", metadata)[0])


def myriadlama_bias_docs(**metadata: Any):
    return as_split(bias_docs("myriadlama", metadata))


# ---------------------------------------------------------------------- task


class BeliefMLMTask(ConfigurableTask):
    """A YAML-configured task whose requests are ``mask_topk`` (lm-eval dispatches by name to the model)."""

    def __init__(self, config: dict | None = None, **kwargs: Any) -> None:
        config = {k: v for k, v in (config or {}).items() if k != "class"}
        config["output_type"] = "loglikelihood"  # lm-eval validates the name; the requests are ours
        super().__init__(config=config, **kwargs)
        self.OUTPUT_TYPE = REQUEST_TYPE

    def construct_requests(self, doc: dict, ctx, **kwargs) -> Instance:
        kwargs.pop("apply_chat_template", None)
        kwargs.pop("chat_template", None)
        # The prompt is the doc's masked prompt itself: no description or few-shot prefix (zero-shot MP).
        targets = unpack(doc, "accepted") if doc.get("accepted") else unpack(doc, "candidates")
        return Instance(request_type=REQUEST_TYPE, doc=doc, arguments=(doc["prompt"], TOP_K, tuple(targets)),
                        idx=0, **kwargs)


# ------------------------------------------------------------- per-doc records


def process_prompt(doc: dict, results: list) -> dict:
    resp = results[0]
    ranked = [(t["rank"], t["token"]) for expr in unpack(doc, "accepted") if (t := resp["targets"].get(expr))]
    gold_rank, gold = min(ranked) if ranked else (None, None)
    record = {
        "relation": doc["relation"], "fact_id": doc["fact_id"], "template_id": doc["template_id"],
        "subject_form": doc["subject_form"], "pred": resp["tokens"][0], "confidence": math.exp(resp["logprobs"][0]),
        "gold": gold, "gold_rank": gold_rank, "top": resp["tokens"], "seed": doc["seed"], "draws": doc["draws"],
        "relation_kept": doc["relation_kept"], "relation_dropped": doc["relation_dropped"],
    }
    return {m: record for m in PROMPT_METRICS}


def process_content_free(doc: dict, results: list) -> dict:
    resp = results[0]
    probs = {str(t["token_id"]): math.exp(t["logprob"]) for t in resp["targets"].values() if t is not None}
    record = {"relation": doc["relation"], "template_id": doc["template_id"], "subject_form": doc["subject_form"],
              "candidate_probs": probs}
    return {m: record for m in BIAS_METRICS}


# ---------------------------------------------------------------- aggregations


def _columns(records: list, k: int) -> tuple:
    """(pair ids, relations, templates, Acc@k hits): the arrays ``metrics.belief`` takes."""
    return (
        tuple(f"{r['relation']}\x1f{r['fact_id']}" for r in records),
        tuple(r["relation"] for r in records),
        tuple(r["template_id"] for r in records),
        tuple(bool(M.hit(r["gold_rank"], k)) for r in records),
    )


@lru_cache(maxsize=8)
def _draws_of(columns: tuple, n_draws: int, seed: int, k: int):
    return B.accuracy_draws(*columns, n_draws=n_draws, seed=seeding.derive_seed(seed, "belief_mlm", "accuracy_draws", k))


def accuracy_values(records: list, k: int = 1):
    """V_Acc@k: the accuracies of the N draws of one prompt per pair (``accuracy_draws`` metadata, default 50,000)."""
    return _draws_of(_columns(records, k), int(records[0]["draws"]), int(records[0]["seed"]), k)


def _acc(k: int):
    @with_stderr(lambda records: B.accuracy_stderr(*_columns(records, k)))
    def agg(records: list) -> float:
        """Acc@k: the mean of the N draws' accuracies (BELIEF v1 eq. 1, v3 section 2.2)."""
        return float(accuracy_values(records, k).mean())

    agg.__name__ = f"acc_at_{k}"
    return agg


acc_at_1 = _acc(1)
acc_at_10 = _acc(10)


def _mrr(r) -> float:
    return M.reciprocal(r["gold_rank"])


def _sem(values) -> float:
    import numpy as np

    v = np.asarray(values, dtype=float)
    return float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else float("nan")


@with_stderr(lambda records: _sem(M.fact_expectations(records, _mrr)))
def mrr(records: list) -> float:
    """MRR (v1 eq. 2): the exact expectation over draws (what the mean of V_MRR estimates)."""
    return float(M.fact_expectations(records, _mrr).mean())


@with_stderr(None)
def acc_at_1_range(records: list) -> float:
    return B.fluctuation(accuracy_values(records, 1))[0]


@with_stderr(None)
def acc_at_1_sd(records: list) -> float:
    return B.fluctuation(accuracy_values(records, 1))[1]


@with_stderr(lambda records: _sem(M.fact_consistencies(records)))
def consist(records: list) -> float:
    return M.token_consistency(records)


def _overconf(k: int):
    def hits(records):
        return [r["confidence"] for r in records], [M.hit(r["gold_rank"], k) for r in records]

    @with_stderr(lambda records: B.overconfidence_stderr(*hits(records)))
    def agg(records: list) -> float:
        """Overconf@k with confidence = the maximum probability at the mask (v1 eq. 6)."""
        return B.overconfidence(*hits(records), int(records[0].get("bins", B.DEFAULT_BINS)))

    agg.__name__ = f"overconf_at_{k}"
    return agg


overconf_at_1 = _overconf(1)
overconf_at_10 = _overconf(10)


def _relation_counts(records: list, key: str) -> float:
    return float(sum({r["relation"]: r[key] for r in records}.values()))


@with_stderr(None)
def prompts_kept(records: list) -> float:
    """Prompts whose objects are single tokens, summed over the relations evaluated."""
    return _relation_counts(records, "relation_kept")


@with_stderr(None)
def prompts_dropped(records: list) -> float:
    return _relation_counts(records, "relation_dropped")


@with_stderr(None)
def bias_single(records: list) -> float:
    return M.bias_single(records)


@with_stderr(None)
def bias_multi(records: list) -> float:
    return M.bias_multi(records)
