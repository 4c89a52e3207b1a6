"""BELIEF-ICL requests and records without a model: answer extraction, greedy + K sampling
requests from one task, cache keys, per-doc records and aggregations."""

from __future__ import annotations

import pytest

from belief_tasks.tasks import belief_icl as B


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
    """The hf hook (belief_tasks.harness, 5.): a request's ``seed`` never reaches HF's generate
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

    def run(arg_list):
        return lm.generate_until([Instance("generate_until", {}, a, k) for k, a in enumerate(arg_list)], disable_tqdm=True)

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
    from belief_tasks.paths import task_yamls_dir
    from lm_eval.tasks import TaskManager

    tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata={"source": "sample", **metadata})
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
    counts = sorted(len(v) for v in by_doc.values())
    assert counts.count(5) == 2 and set(counts) == {1, 5}  # two docs: greedy + 4 samples
    for insts in by_doc.values():
        assert all(i.request_type == "generate_until" for i in insts)
        assert insts[0].args[1]["do_sample"] is False
        assert len({i.args[0] for i in insts}) == 1  # one prompt
        assert [i.idx for i in insts] == list(range(len(insts)))
    ctx = task.instances[0].args[0]
    assert ctx.startswith("Answer each question in one word.\nQ: ") and ctx.endswith("?\nA:")


def _record(pair, template, subject, answer, objects, confidence=None, relation="P36"):
    doc = {"fact_id": pair, "relation": relation, "template_id": template, "subject_form": subject, "style": "mp",
           "context": "zeroshot", "objects": objects, "seed": 1, "draws": 2000, "bins": 10}
    samples = [] if confidence is None else confidence
    return B.make_record(doc, answer, samples)


def test_records_and_aggregations():
    recs = [
        _record("f", "t0", "France", " Paris.", ["Paris"], [" Paris.", " Lyon.", " paris"]),
        _record("f", "t1", "France", " Lyon.", ["Paris"]),
        _record("g", "t0", "Germany", " Berlin.", ["Berlin"]),
        _record("g", "t1", "Germany", " the city of Berlin", ["Berlin"], [" Munich."]),
    ]
    assert [r["correct"] for r in recs] == [True, False, True, True]
    assert [r["one_word"] for r in recs] == [True, True, True, False]
    assert recs[0]["confidence"] == pytest.approx(2 / 3) and recs[0]["n_samples"] == 3
    assert recs[1]["confidence"] is None and recs[3]["confidence"] == 0.0
    assert B.agg_acc(recs) == pytest.approx(0.75, abs=0.03)  # f: 1/2, g: 1
    assert B.agg_coverage_average(recs) == pytest.approx(0.75)
    assert B.agg_coverage_oracle(recs) == 1.0
    assert B.agg_acc_range(recs) == 0.5  # template t1 -> 0.5, t0 -> 1.0
    assert B.agg_consist(recs) == pytest.approx(0.5)  # f disagrees, g agrees ("the city of Berlin" contains "Berlin")
    assert B.agg_ovconf(recs) == pytest.approx((2 / 3 + 0) / 2 - 1.0)
    assert B.agg_one_word(recs) == 0.75
    assert B.agg_acc.stderr(recs) == pytest.approx(0.25)  # pairs .5 and 1
    assert B.agg_acc_range.stderr is None and B.agg_acc_sd.stderr is None
