"""Harness glue for MONITOR on FKTC (``belief_monitor``, ``belief_monitor_<Pid>``, ``belief_monitor_sample``).

One doc per fact. Its requests (``MonitorTask.construct_requests``), in this order:

1. the anchors: the gold object's per-subword probabilities under 1 positive
   context, R frames and M negative contexts (``belief_tasks.prompts.monitor``);

   * route ``prefix`` (default, any backend with ``loglikelihood``, exact on ``hf``):
     one loglikelihood request per subword on growing prefixes; the subword cuts come
     from the evaluated model's tokenizer (model args ``tokenizer`` / ``pretrained`` /
     ``model``, as lm-eval's RULER tasks find it) and are checked to re-tokenise exactly;
   * route ``per_token``: one ``per_token_loglikelihood`` request per anchor
     (``(context, continuation) -> per-token log-probs``), served by ``hf-shared``;
2. the greedy answers (``generate_until``) under the positive context and the R frames.

Scoring requests come first, so a backend without them fails before any generation.

Run options (``--metadata`` JSON, besides ``source`` / ``fktc_path`` and the common
``seed``, ``max_facts_per_relation``; ``relations`` applies to ``belief_monitor_sample``):

* ``monitor_route``: ``"prefix"`` (default) or ``"per_token"``;
* ``answer_format``: ``"qa"`` (default, ``"Question: {prompt}\\nAnswer:"``), ``"bare"``
  (the question alone, as in the paper's Table 1) or a string holding ``{prompt}``;
* ``monitor_alpha``: a1,a2,a3 of eq. 3 (default 0.33,0.33,0.33);
* ``only_correct_primary``: score MONITOR / PFD / IRD / probabilities only on facts whose
  greedy answer under the positive context is correct (the reference code's filter).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any, Mapping

from belief_tasks.data import load_facts
from belief_tasks.data.fktc import RELATION_IDS, RELATION_NAMES
from belief_tasks.matching import contains_answer
from belief_tasks.metrics import monitor as M
from belief_tasks.prompts import monitor as P
from belief_tasks.schema import SchemaError
from belief_tasks.options import COMMON, parse_options
from belief_tasks.tasks.base import as_split, select_facts, unpack, with_stderr

log = logging.getLogger(__name__)

ROUTES = ("prefix", "per_token")
PER_TOKEN_REQUEST = "per_token_loglikelihood"
MAX_FRAMES = 7  # FKTC: 7 frames, 6 for P264 and P276
TOKENIZER_ARG_KEYS = ("tokenizer", "pretrained", "model")  # as lm_eval.tasks.ruler.common_utils


# --- options ----------------------------------------------------------------------------------


def _flag(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def run_settings(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The MONITOR options, validated before any model time."""
    md = metadata or {}
    route = str(md.get("monitor_route") or "prefix").lower()
    if route not in ROUTES:
        raise ValueError(f"monitor_route must be one of {ROUTES}, got {route!r}")
    alpha = md.get("monitor_alpha") or M.DEFAULT_ALPHA
    if isinstance(alpha, str):
        alpha = [a for a in alpha.replace("|", ",").split(",") if a.strip()]
    alpha = [float(a) for a in alpha]
    if len(alpha) != 3 or any(a < 0 or math.isnan(a) for a in alpha):
        raise ValueError(f"monitor_alpha needs three non-negative numbers (a1, a2, a3), got {md.get('monitor_alpha')!r}")
    return {
        "route": route,
        "answer_format": P.answer_format(md.get("answer_format")),
        "alpha": alpha,
        "only_correct_primary": _flag(md.get("only_correct_primary", False)),
    }


# --- the evaluated model's tokenizer ------------------------------------------------------------


def tokenizer_name(metadata: Mapping[str, Any] | None) -> str:
    md = metadata or {}
    for key in TOKENIZER_ARG_KEYS:
        value = md.get(key)
        if isinstance(value, str) and value:
            return value
    raise ValueError(
        "MONITOR needs the evaluated model's tokenizer to score the gold object subword by subword "
        "(P(o_l | prompt, o_<l)), and found none in the model args: pass --model_args pretrained=... "
        "(or tokenizer=...). Backends that only generate text (chat APIs) cannot run MONITOR: it needs "
        "per-token probabilities of a given answer (loglikelihood requests)."
    )


@lru_cache(maxsize=4)
def _load_tokenizer(name: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - turned into one clear message
        raise ValueError(
            f"MONITOR could not load the tokenizer {name!r} of the evaluated model ({type(e).__name__}: {e}). "
            "It needs it to cut the gold object into the model's subwords; pass tokenizer=<local folder or hub id> "
            "in --model_args. Generate-only backends cannot run MONITOR (no per-token probabilities)."
        ) from e


class Codec:
    """The evaluated model's tokenizer, encoding as lm-eval's ``hf`` backend does (``tok_encode``)."""

    def __init__(self, metadata: Mapping[str, Any] | None):
        md = metadata or {}
        self.tokenizer = _load_tokenizer(tokenizer_name(md), _flag(md.get("trust_remote_code", False)))
        bos = md.get("add_bos_token")
        self.special = {} if bos in (None, "") else {"add_special_tokens": _flag(bos)}

    def encode(self, strings) -> list[list[int]]:
        return self.tokenizer(list(strings), **self.special)["input_ids"]

    def candidates(self, prompt: str, answer: str) -> list[int] | None:
        """Token end offsets inside the answer (and their neighbours); None: try every offset."""
        if not getattr(self.tokenizer, "is_fast", False):
            return None
        spans = self.tokenizer(prompt + answer, return_offsets_mapping=True, **self.special)["offset_mapping"]
        ends = {end - len(prompt) for _, end in spans if end > len(prompt)}
        return sorted({e + d for e in ends for d in (-1, 0, 1)})


# --- docs -----------------------------------------------------------------------------------------


def build_docs(fs, metadata: Mapping[str, Any], relation: str | None = None) -> list[dict]:
    settings = run_settings(metadata)
    opts = parse_options(COMMON, metadata)
    if relation is not None:
        if relation not in fs.relations:
            raise ValueError(
                f"belief_monitor_{relation}: relation {relation} is not in {fs.source} "
                f"(it has {sorted(fs.relations)}). The belief_monitor subtasks are FKTC's 20 relations; "
                "on the bundled sample run belief_monitor_sample."
            )
        opts = opts.replace(relations=(relation,))
    docs = []
    for fact in select_facts(fs, opts):
        rel = fs.relations[fact.relation]
        if len(rel.frames) > MAX_FRAMES:
            raise SchemaError(f"{len(rel.frames)} frames; MONITOR reports at most {MAX_FRAMES}", row=rel.id, field="frames")
        anchors = P.anchor_prompts(fact, rel, settings["answer_format"])
        docs.append({
            "fact_id": fact.id,
            "relation": fact.relation,
            "template_id": rel.frames[0].id,  # the base question
            "subject": fact.subject.label,
            "object": fact.object.label,
            "accepted": list(fact.object_expressions),
            "negatives": [n.label for n in fact.negatives],
            "anchors": [{"key": a.key, "kind": a.kind, "text": a.text} for a in anchors],
        })
    return docs


def _dataset(metadata: Mapping[str, Any], relation: str | None) -> dict:
    run_settings(metadata)
    Codec(metadata)  # no tokenizer, no run: say so before any model time
    return as_split(build_docs(load_facts("fktc", metadata), metadata, relation))


def fktc_dataset(monitor_relation: str | None = None, **metadata):
    """``custom_dataset`` of ``belief_monitor_<Pid>``: the facts of one FKTC relation."""
    return _dataset(metadata, monitor_relation)


def sample_dataset(**metadata):
    """``custom_dataset`` of ``belief_monitor_sample``: every relation of the bundled sample."""
    return _dataset({**metadata, "source": "sample"}, None)


def doc_to_text(doc) -> str:
    return unpack(doc, "anchors")[0]["text"]


def doc_to_target(doc) -> str:
    return doc["object"]


# --- requests -------------------------------------------------------------------------------------


def plan(doc, codec: Codec) -> dict:
    """The subword units of a fact's answer, shared by all its anchors, and each anchor's token counts."""
    answer = " " + doc["object"]
    anchors = unpack(doc, "anchors")
    pieces = [P.exact_cuts(codec.encode, a["text"], answer, codec.candidates(a["text"], answer)) for a in anchors]
    cuts = P.subword_units(pieces, answer)
    return {
        "answer": answer,
        "anchors": anchors,
        "cuts": cuts,
        "counts": [P.unit_token_counts(p, cuts) for p in pieces],
        "n_tokens": [len(p.answer_ids) for p in pieces],
    }


def requests_of(pl: dict, settings: dict, gen_kwargs: dict) -> list[tuple[str, tuple]]:
    """(request type, arguments) in order: anchors first, then greedy answers."""
    out = []
    for a in pl["anchors"]:
        if settings["route"] == "prefix":
            out += [("loglikelihood", args) for args in P.prefix_requests(a["text"], pl["answer"], pl["cuts"])]
        else:
            out.append((PER_TOKEN_REQUEST, (a["text"], pl["answer"])))
    out += [("generate_until", (a["text"], dict(gen_kwargs))) for a in pl["anchors"] if a["kind"] != "negative"]
    return out


def _unit_probs(results: list, pl: dict, route: str) -> list[list[float]]:
    """Per anchor, the probability of each unit, from the results in request order."""
    probs, i = [], 0
    for counts, n_tokens in zip(pl["counts"], pl["n_tokens"]):
        if route == "prefix":
            lls = [float(r[0]) for r in results[i:i + len(counts)]]
            i += len(counts)
        else:
            tokens = [float(x) for x in results[i]]
            i += 1
            if len(tokens) != n_tokens:
                raise ValueError(
                    f"{PER_TOKEN_REQUEST} returned {len(tokens)} log-probs for an answer the model's tokenizer "
                    f"splits into {n_tokens} tokens: the backend tokenises differently from tokenizer=/pretrained="
                )
            starts = [sum(counts[:k]) for k in range(len(counts))]
            lls = [sum(tokens[s:s + c]) for s, c in zip(starts, counts)]
        probs.append([math.exp(x) for x in lls])
    return probs


try:
    from lm_eval.api.instance import Instance
    from lm_eval.api.task import ConfigurableTask
except ImportError:  # metrics and docs work without the harness
    ConfigurableTask = object  # type: ignore[assignment,misc]


class MonitorTask(ConfigurableTask):  # type: ignore[misc,valid-type]
    """Builds each fact's anchor and answer requests itself (several request types per doc)."""

    def __init__(self, config: dict | None = None, **kwargs):
        # The YAML's ``class:`` key reaches us inside the config; TaskConfig does not know it.
        # A process_results in the config tells lm-eval our metric names need no registry
        # lookup (unknown names are otherwise searched on the HF Evaluate hub, with retries).
        cfg = {k: v for k, v in (config or {}).items() if k != "class"}
        cfg["process_results"] = _handled_by_task
        super().__init__(config=cfg, **kwargs)

    def _settings(self) -> dict:
        return run_settings(self.config.metadata)

    def _plan(self, doc) -> dict:
        """The fact's subword plan, computed once for its requests and its results."""
        if getattr(self, "_codec", None) is None:
            self._codec, self._plans = Codec(self.config.metadata), {}
        key = (doc["relation"], doc["fact_id"])
        if key not in self._plans:
            self._plans[key] = plan(doc, self._codec)
        return self._plans[key]

    def construct_requests(self, doc, ctx, **kwargs):
        if kwargs.pop("apply_chat_template", False):
            log.warning("%s: MONITOR builds its own prompts; the chat template is not applied", self.config.task)
        kwargs.pop("chat_template", None)
        reqs = requests_of(self._plan(doc), self._settings(), self.config.generation_kwargs or {})
        return [Instance(request_type=t, doc=doc, arguments=args, idx=i, **kwargs) for i, (t, args) in enumerate(reqs)]

    def process_results(self, doc, results):
        return records_of(doc, results, self._settings(), self._plan(doc))


def _handled_by_task(doc, results):
    raise NotImplementedError("MonitorTask.process_results scores MONITOR docs")


def records_of(doc, results, settings: dict, pl: dict) -> dict[str, dict]:
    """The fact's record (every metric gets the same one) from its results in request order."""
    n_score = sum(len(c) for c in pl["counts"]) if settings["route"] == "prefix" else len(pl["anchors"])
    probs = _unit_probs(results[:n_score], pl, settings["route"])
    answered = [a for a in pl["anchors"] if a["kind"] != "negative"]
    answers = {a["key"]: P.first_line(r) for a, r in zip(answered, results[n_score:], strict=True)}
    accepted = unpack(doc, "accepted")
    kinds = [a["kind"] for a in pl["anchors"]]
    frame_ids = [a["key"] for a in pl["anchors"] if a["kind"] == "frame"]
    record = {
        "relation": doc["relation"],
        "fact_id": doc["fact_id"],
        "template_id": doc["template_id"],
        "subject_form": "label",
        "object": doc["object"],
        "route": settings["route"],
        "units": [pl["answer"][a:b] for a, b in zip(pl["cuts"], pl["cuts"][1:])],
        "n_tokens": pl["n_tokens"][0],
        "primary": probs[kinds.index("positive")],
        "frame_ids": frame_ids,
        "frames": [p for p, k in zip(probs, kinds) if k == "frame"],
        "negative_labels": unpack(doc, "negatives"),
        "negatives": [p for p, k in zip(probs, kinds) if k == "negative"],
        "positive_answer": answers["positive"],
        "positive_correct": int(contains_answer(answers["positive"], accepted)),
        "answers": [answers[f] for f in frame_ids],
        "correct": [int(contains_answer(answers[f], accepted)) for f in frame_ids],
        "alpha": settings["alpha"],
        "only_correct_primary": settings["only_correct_primary"],
    }
    out = {name: record for name in METRICS}
    out.update({f"acc_frame_{j}": record for j in range(len(frame_ids))})
    return out


# --- aggregations: records -> numbers (per relation, then the unweighted mean over relations) -----


def _fact(r: dict) -> dict:
    """Per-fact quantities of eqs. 1-3 from one record."""
    return {
        "relation": r["relation"],
        "pfd": M.prompt_framing_degree(r["primary"], r["frames"]),
        "ird": M.interference_relevance_degree(r["primary"], r["negatives"]),
        "primary_prob": M.mean_subword_probability(r["primary"]),
        "frame_prob": sum(M.mean_subword_probability(q) for q in r["frames"]) / len(r["frames"]),
        "negative_prob": sum(M.mean_subword_probability(q) for q in r["negatives"]) / len(r["negatives"]),
        "correct": r["correct"],
        "positive_correct": r["positive_correct"],
        "scored": (not r.get("only_correct_primary")) or bool(r["positive_correct"]),
        "alpha": tuple(r.get("alpha") or M.DEFAULT_ALPHA),
    }


def _by_relation(facts: list[dict], anchors: bool) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for f in facts:
        if anchors and not f["scored"]:
            continue
        groups.setdefault(f["relation"], []).append(f)
    return groups


def _monitor(facts):
    def one(fs):
        alphas = {f["alpha"] for f in fs}
        if len(alphas) != 1:
            raise ValueError(f"records mix monitor_alpha settings {sorted(alphas)}")
        return M.monitor_score([f["pfd"] for f in fs], [f["ird"] for f in fs], [f["primary_prob"] for f in fs], alphas.pop())

    return M.mean_over_groups({rel: one(fs) for rel, fs in _by_relation(facts, True).items()})


def _mean_of(key: str):
    def stat(facts):
        return M.mean_over_groups({rel: sum(f[key] for f in fs) / len(fs) for rel, fs in _by_relation(facts, True).items()})

    return stat


def _accuracy(which: str):
    def stat(facts):
        return M.mean_over_groups({rel: M.accuracy_summary([f["correct"] for f in fs])[which] for rel, fs in _by_relation(facts, False).items()})

    return stat


def _positive_accuracy(facts):
    return M.mean_over_groups({rel: sum(f["positive_correct"] for f in fs) / len(fs) for rel, fs in _by_relation(facts, False).items()})


def _frame_accuracy(j: int):
    def stat(facts):
        groups = {rel: [f for f in fs if len(f["correct"]) > j] for rel, fs in _by_relation(facts, False).items()}
        return M.mean_over_groups({rel: M.frame_accuracies([f["correct"] for f in fs])[j] for rel, fs in groups.items() if fs})

    return stat


def _aggregation(stat, name: str):
    """An aggregation over records with a bootstrap standard error over facts."""

    @with_stderr(lambda records: M.bootstrap_stderr([_fact(r) for r in records], stat, iters=100, seed=0))
    def agg(records):
        return stat([_fact(r) for r in records])

    agg.__name__ = agg.__qualname__ = f"agg_{name}"
    return agg


STATISTICS = {
    "monitor": _monitor,
    "pfd": _mean_of("pfd"),
    "ird": _mean_of("ird"),
    "primary_prob": _mean_of("primary_prob"),
    "frame_prob": _mean_of("frame_prob"),
    "negative_prob": _mean_of("negative_prob"),
    "acc_avg": _accuracy("avg"),
    "acc_max": _accuracy("max"),
    "acc_min": _accuracy("min"),
    "acc_positive": _positive_accuracy,
}
METRICS = tuple(STATISTICS)
HIGHER_IS_BETTER = {"monitor": False, "pfd": False, "ird": False}

agg_monitor = _aggregation(STATISTICS["monitor"], "monitor")
agg_pfd = _aggregation(STATISTICS["pfd"], "pfd")
agg_ird = _aggregation(STATISTICS["ird"], "ird")
agg_primary_prob = _aggregation(STATISTICS["primary_prob"], "primary_prob")
agg_frame_prob = _aggregation(STATISTICS["frame_prob"], "frame_prob")
agg_negative_prob = _aggregation(STATISTICS["negative_prob"], "negative_prob")
agg_acc_avg = _aggregation(STATISTICS["acc_avg"], "acc_avg")
agg_acc_max = _aggregation(STATISTICS["acc_max"], "acc_max")
agg_acc_min = _aggregation(STATISTICS["acc_min"], "acc_min")
agg_acc_positive = _aggregation(STATISTICS["acc_positive"], "acc_positive")
agg_acc_frame_0, agg_acc_frame_1, agg_acc_frame_2, agg_acc_frame_3, agg_acc_frame_4, agg_acc_frame_5, agg_acc_frame_6 = (
    _aggregation(_frame_accuracy(j), f"acc_frame_{j}") for j in range(MAX_FRAMES)
)


# --- task YAMLs (generated: python -m belief_tasks.tasks.monitor task_yamls/monitor) ----------------

FKTC_RELATIONS = {rid: RELATION_NAMES[rid] for rid in RELATION_IDS}
GROUP_METRICS = ("monitor", "pfd", "ird", "primary_prob", "acc_avg", "acc_max", "acc_min", "acc_positive")
_HEADER = "# Generated by `python -m belief_tasks.tasks.monitor task_yamls/monitor`; edit the generator, not this file.\n"


def _metric_list(n_frames: int = MAX_FRAMES) -> str:
    names = list(METRICS) + [f"acc_frame_{j}" for j in range(n_frames)]
    return "".join(
        f"  - metric: {m}\n    aggregation: !function utils.agg_{m}\n    higher_is_better: {str(HIGHER_IS_BETTER.get(m, True)).lower()}\n"
        for m in names
    )


def render_yamls() -> dict[str, str]:
    """File name -> text of every MONITOR task YAML (the shared part, 20 FKTC subtasks, the sample task, the group)."""
    common = (
        _HEADER + "# Shared settings of the MONITOR tasks (docs/monitor.md). One doc per fact; MonitorTask\n"
        "# issues its anchor requests (loglikelihood or per_token_loglikelihood) and greedy answers itself.\n"
        "class: !function utils.MonitorTask\ntest_split: test\noutput_type: generate_until\n"
        "doc_to_text: !function utils.doc_to_text\ndoc_to_target: !function utils.doc_to_target\n"
        "generation_kwargs:\n  until: [\"\\n\\n\"]\n  max_gen_toks: 16\n  do_sample: false\n  temperature: 0.0\n"
        "metric_list:\n" + _metric_list()
    )
    files = {"_monitor_common_yaml": common}
    for rid, name in FKTC_RELATIONS.items():
        files[f"belief_monitor_{rid}.yaml"] = (
            _HEADER + f"task: belief_monitor_{rid}\ninclude: _monitor_common_yaml\nclass: !function utils.MonitorTask\n"
            f"custom_dataset: !function utils.fktc_dataset\ndataset_kwargs:\n  monitor_relation: {rid}\n"
            f"metadata:\n  version: 1.0\n  description: \"MONITOR (Wang et al., 2024) on FKTC {rid} ({name}): "
            "prompt-framing and interference distances of the gold object's subword probabilities\"\n"
        )
    files["belief_monitor_sample.yaml"] = (
        _HEADER + "task: belief_monitor_sample\ninclude: _monitor_common_yaml\nclass: !function utils.MonitorTask\n"
        "custom_dataset: !function utils.sample_dataset\nmetadata:\n  version: 1.0\n"
        "  description: \"MONITOR (Wang et al., 2024) on the bundled sample's relations, each scored alone then averaged\"\n"
    )
    files["belief_monitor.yaml"] = (
        _HEADER + "group: belief_monitor\ntask:\n" + "".join(f"  - belief_monitor_{r}\n" for r in FKTC_RELATIONS)
        + "aggregate_metric_list:\n"
        + "".join(f"  - metric: {m}\n    aggregation: mean\n    weight_by_size: false\n" for m in GROUP_METRICS)
        + "metadata:\n  version: 1.0\n  description: \"MONITOR on FKTC's 20 relations; group scores are unweighted means over relations (Table 4)\"\n"
    )
    return files


def write_yamls(folder) -> None:
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in render_yamls().items():
        (folder / name).write_text(text)


if __name__ == "__main__":
    import sys

    write_yamls(sys.argv[1] if len(sys.argv) > 1 else "task_yamls/monitor")
