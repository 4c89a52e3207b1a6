"""BELIEF-ICL requests and records without a model: answer extraction, greedy + K sampling
requests from one task, cache keys, per-doc records and aggregations."""

from __future__ import annotations

import math

import pytest

from belief_tasks.scoring import belief_icl as SC
from belief_tasks.scoring.common import SameRecord
from belief_tasks.tasks import belief_icl as B
from belief_tasks.tasks.base import unpack


@pytest.mark.parametrize(
    "raw, answer",
    [
        (" Paris.", "Paris"),
        (' "Paris".', "Paris"),
        (" 'Paris'", "Paris"),
        (" \u201cParis.\u201d", "Paris"),
        (" Paris. Q: What is the capital of Italy?", "Paris"),
        (" Paris.\nQ: [MASK] is the capital of Italy.\nA: Rome.", "Paris"),
        ("A: Paris", "Paris"),
        (" New York City.", "New York City"),
        ("", ""),
        (" .", ""),
    ],
)
def test_extract_answer(raw, answer):
    assert B.extract_answer(raw) == answer


def test_sampling_kwargs_sample_the_full_vocabulary_and_differ_only_by_a_redundant_stop():
    greedy = {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}
    kws = [B.sampling_kwargs(greedy, i) for i in range(3)]
    for i, kw in enumerate(kws):
        assert kw["do_sample"] is True and kw["temperature"] == 1.0 and kw["top_k"] == 0 and kw["top_p"] == 1.0
        assert kw["max_gen_toks"] == 16
        assert kw["until"][0] == "\n" and kw["until"][1].startswith("\n") and str(i) in kw["until"][1]
    assert greedy == {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}  # not mutated


def test_sample_seeds_come_from_the_prompt_ids_only():
    doc = {"seed": 1234, "fact_id": "P36/Q142", "template_id": "P36_t0", "subject_form": "label", "style": "mp"}
    seeds = [B.sample_seed(doc, i) for i in range(100)]
    assert len(set(seeds)) == 100 and seeds == [B.sample_seed(dict(doc), i) for i in range(100)]
    assert B.sample_seed({**doc, "seed": 1}, 0) != seeds[0] and B.sample_seed({**doc, "fact_id": "x"}, 0) != seeds[0]
    greedy = {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}
    assert B.sampling_kwargs(greedy, 3, seeds[3])["seed"] == seeds[3]
    assert "seed" not in B.sampling_kwargs(greedy, 3)


@pytest.mark.e2e
def test_seeded_samples_on_hf_do_not_depend_on_the_batch(model_path):
    """The hf hook (belief_tasks.hooks.harness, 5.): the ``seed`` of a sample of ours never reaches HF's generate
    (which would reject it) and fixes that request's sample, whatever else is in the run
    (batched seeded sampling: tests/test_hf_seeded_sampling.py)."""
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(model_path), device="cpu", dtype="float32", batch_size=4)
    greedy = {"until": ["\n"], "do_sample": False, "max_gen_toks": 8}
    prompts = ["Q: What is the capital of France?\nA:", "Q: Who wrote Hamlet?\nA:"]
    args = [(p, B.sampling_kwargs(greedy, i, 1000 + 10 * j + i)) for j, p in enumerate(prompts) for i in range(4)]

    from belief_tasks.hooks import harness

    harness.OUR_TASKS.add("belief_test_seeded_hf")  # as BeliefTask adds its name: the hook serves our tasks only

    def run(arg_list):
        return lm.generate_until(
            [
                Instance("generate_until", {}, a, k, metadata=("belief_test_seeded_hf", k, 1))
                for k, a in enumerate(arg_list)
            ],
            disable_tqdm=True,
        )

    together = run(args)
    assert run(args[::-1]) == together[::-1]  # order and batch neighbours do not matter
    assert [run([a])[0] for a in args[:2]] == together[:2]  # alone, the same text
    assert len(set(together)) > 2  # seeds differ, so do the samples
    unseeded = [(p, {k: v for k, v in kw.items() if k != "seed"}) for p, kw in args[:4]]
    assert run(unseeded) != run(unseeded)  # without seeds: the running RNG stream (the old behaviour)


def test_sample_requests_have_distinct_cache_keys_and_identical_outputs():
    from lm_eval.api.model import hash_args
    from lm_eval.models.utils import postprocess_generated_text

    greedy = {"until": ["\n"], "do_sample": False, "max_gen_toks": 16}
    keys = {hash_args("generate_until", ("ctx", B.sampling_kwargs(greedy, i))) for i in range(100)}
    assert len(keys) == 100  # --use_cache keeps 100 answers, not one
    # the extra stop string starts with "\n", so cutting at it never changes what "\n" leaves
    for text in (" Paris.\n<belief-sample 3>", " Paris.\nQ: x", " Paris", "\n<belief-sample 0>x"):
        plain = postprocess_generated_text(text, ["\n"], None)
        assert postprocess_generated_text(text, B.sampling_kwargs(greedy, 3)["until"], None) == plain


def _task(name: str, metadata: dict):
    import belief_tasks

    belief_tasks.install()  # our backends and hooks
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(
        include_path=str(task_yamls_dir()), include_defaults=False, metadata={"source": "sample", **metadata}
    )
    return tm.load([name])["tasks"]


def test_one_task_emits_the_greedy_request_and_k_sampling_requests():
    meta = {"relations": "P36", "max_facts_per_relation": 3, "confidence_samples": 4, "confidence_prompts": 2}
    tasks = _task("belief_qa_4random", meta)
    task = next(iter(tasks.values()))
    assert isinstance(task, B.BeliefICLTask)
    task.build_all_requests(rank=0, world_size=1)
    by_doc: dict = {}
    for inst in task.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    assert len(by_doc) == 3  # one document per pair
    n_sampled = []
    for insts in by_doc.values():
        doc = insts[0].doc
        assert all(i.request_type == "generate_until" and i.doc is doc for i in insts)
        assert [i.idx for i in insts] == list(range(len(insts)))
        greedy = [i for i in insts if not i.args[1]["do_sample"]]
        sampled = [i for i in insts if i.args[1]["do_sample"]]
        assert len(greedy) == len(unpack(doc, "templates")) * len(unpack(doc, "subjects"))  # one per prompt
        assert len({i.args[0] for i in greedy}) == len(greedy)  # distinct prompts
        n_sampled.append(len(sampled))
        if sampled:  # K samples of the sampled prompt, right after its greedy request, with its text
            j = doc["sampled"]
            assert [i.idx for i in sampled] == list(range(j + 1, j + 5))
            assert {i.args[0] for i in sampled} == {greedy[j].args[0]}
            ids = B.prompt_ids(doc, j)
            assert [i.args[1]["seed"] for i in sampled] == [B.sample_seed(ids, k) for k in range(4)]
    assert sorted(n_sampled) == [0, 4, 4]  # two pairs sampled
    ctx = task.instances[0].args[0]
    assert ctx.startswith("Answer each question in one word.\nQ: ") and ctx.endswith("?\nA:")


def _pair(pair, templates, subject, greedy, objects, sampled=None, samples=(), relation="P36"):
    """A pair document and what the model answered, as ``process_results`` receives it."""
    from belief_tasks.facts.schema import Entity, Fact, fact_key

    key = fact_key(Fact(pair, relation, Entity(subject), tuple(Entity(o) for o in objects))).as_record()
    doc = {
        "fact_id": pair,
        "relation": relation,
        "fact_key": key,
        "style": "mp",
        "context": "zeroshot",
        "templates": templates,
        "subjects": [subject],
        "objects": objects,
        "sampled": sampled,
        "n_samples": len(samples),
        "seed": 1,
        "draws": 2000,
        "bins": 10,
    }
    results = list(greedy)
    if sampled is not None:
        results[sampled + 1 : sampled + 1] = samples  # the K samples follow the sampled prompt's greedy answer
    return doc, results


def _records():
    pairs = [
        _pair("f", ["t0", "t1"], "France", [" Paris.", " Lyon."], ["Paris"], 0, [" Paris.", " Lyon.", " paris"]),
        _pair("g", ["t0", "t1"], "Germany", [" Berlin.", " the city of Berlin"], ["Berlin"], 1, [" Munich."]),
    ]
    return [B.process_results(doc, results) for doc, results in pairs]


def test_records_and_aggregations():
    logged = _records()
    recs = [x["acc"] for x in logged]
    f, g = recs
    assert f["answers"] == ["Paris", "Lyon"] and g["answers"] == ["Berlin", "the city of Berlin"]
    assert f["correct"] == [True, False] and g["correct"] == [True, True]
    assert f["confidence"] == pytest.approx(2 / 3) and f["n_samples"] == 3 and f["sampled"] == 0
    assert g["confidence"] == 0.0 and g["sampled"] == 1
    assert SC.agg_acc(recs) == pytest.approx(0.75, abs=0.03)  # f: 1/2, g: 1
    assert SC.agg_coverage_average(recs) == pytest.approx(0.75)
    assert SC.agg_coverage_oracle(recs) == 1.0
    assert SC.agg_acc_range(recs) == 0.5  # template t1 -> 0.5, t0 -> 1.0
    assert SC.agg_consist(recs) == pytest.approx(0.5)  # f disagrees, g agrees ("the city of Berlin" contains "Berlin")
    assert SC.agg_ovconf(recs) == pytest.approx((2 / 3 + 0) / 2 - 1.0)
    assert SC.agg_one_word(recs) == 0.75
    assert SC.METRICS["acc"].stderr(recs) == pytest.approx(0.25)  # pairs .5 and 1
    assert SC.METRICS["acc_range"].stderr_function is None is SC.METRICS["acc_sd"].stderr_function
    # lm-eval hands each metric its own list: the record under "acc", references under the others
    for name, declared in SC.METRICS.items():
        agg = declared.aggregation
        items = [x[name] for x in logged]
        assert all(isinstance(x, SameRecord) and x.record is r for x, r in zip(items, recs)) or name == "acc"
        assert agg(items) == agg(recs) or math.isnan(agg(recs))
    assert str(logged[0]["consist"]) == "<same as acc>"


def test_one_prompt_records_of_earlier_logs_aggregate_to_the_same_numbers():
    recs = [x["acc"] for x in _records()]
    legacy = []
    for r in recs:
        for k, (t, a, c) in enumerate(zip(r["templates"], r["answers"], r["correct"])):
            legacy.append(
                {
                    "fact_id": r["fact_id"],
                    "relation": r["relation"],
                    "template_id": t,
                    "subject_form": r["subjects"][0],
                    "answer": a,
                    "correct": c,
                    "style": "mp",
                    "context": "zeroshot",
                    "confidence": r["confidence"] if k == r["sampled"] else None,
                    "seed": 1,
                    "draws": 2000,
                    "bins": 10,
                }
            )
    for name, declared in SC.METRICS.items():
        agg = declared.aggregation
        assert agg(legacy) == pytest.approx(agg(recs), nan_ok=True), name
        se = declared.stderr_function
        if se is not None:
            assert se(legacy) == pytest.approx(se(recs), nan_ok=True), name
