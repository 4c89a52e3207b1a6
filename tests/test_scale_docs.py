"""BELIEF-ICL at MyriadLAMA scale, small (docs/scale.md): the synthetic hub-layout copy of
``python -m benchmarks scale``, one document per pair, ranks that build only their own prompts, and
sample logs that hold each record once.

Everything runs on a synthetic MyriadLAMA at 0.2% of its size (49 pairs, 41 relations x 100
templates) with lm-eval's ``dummy`` model, in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import scale

from harness import evaluate

FRACTION = 0.002


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("myriadlama") / "copy"
    return folder, scale.write_synthetic(folder, FRACTION)


def meta(folder: Path, **extra) -> dict:
    return {
        "myriadlama_path": str(folder),
        "mp_templates": "all",
        "confidence_samples": 3,
        "confidence_prompts": 5,
        "accuracy_draws": 200,
        **extra,
    }


def test_synthetic_copy_has_myriadlamas_shape(synthetic):
    from belief_tasks.data import load_facts

    folder, info = synthetic
    assert info["pairs"] == 49 and info["rows"] == 4_900 and info["relations"] == 41
    fs = load_facts("myriadlama", {"myriadlama_path": str(folder)})
    assert len(fs.facts) == 49 and len(fs.relations) == 41
    for rel in fs.relations.values():
        assert len(rel.templates) == 100
        assert len(rel.templates_of(manual_only=True)) == 5 and len(rel.templates_of("question")) == 20
    assert sum(100 * len(f.subject.expressions) for f in fs.facts) == info["prompts_all_templates"]
    # written once: a second call with the same fraction reuses the copy
    stamp = next(folder.glob("*.parquet")).stat().st_mtime_ns
    assert scale.write_synthetic(folder, FRACTION) == info
    assert next(folder.glob("*.parquet")).stat().st_mtime_ns == stamp


def test_every_prompt_once_with_k_samples_for_the_sampled_pairs(synthetic):
    folder, info = synthetic
    out = evaluate(["belief_mp_4template"], "", model="dummy", metadata={"source": "", **meta(folder)})
    samples = out["samples"]["belief_mp_4template"]
    assert len(samples) == info["pairs"]  # one document per pair
    prompts = sum(len(s["acc"]["answers"]) for s in samples)
    assert prompts == info["prompts_all_templates"]
    assert sum(len(s["arguments"]) for s in samples) == prompts + 5 * 3
    assert sum(s["acc"]["n_samples"] for s in samples) == 15
    assert out["results"]["belief_mp_4template"]["one_word_ratio,none"] == 1.0  # the dummy says "lol"


def test_each_rank_builds_only_its_own_pairs_and_the_union_is_the_whole_task(synthetic):
    import belief_tasks

    belief_tasks.install()
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir
    from belief_tasks.tasks import belief_icl as B

    folder, _ = synthetic

    def requests(rank: int, world: int) -> list:
        tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=meta(folder))
        task = next(iter(tm.load(["belief_mp_4random"])["tasks"].values()))
        rendered = []
        render = B.PromptSet.render
        B.PromptSet.render = lambda self, fact: rendered.append(fact.id) or render(self, fact)
        try:
            task.build_all_requests(rank=rank, world_size=world)
        finally:
            B.PromptSet.render = render
        assert rendered == list(dict.fromkeys(i.doc["fact_id"] for i in task.instances))  # only its own pairs
        return [(i.doc_id, i.idx, i.args[0], json.dumps(i.args[1], sort_keys=True)) for i in task.instances]

    whole = requests(0, 1)
    halves = requests(0, 2) + requests(1, 2)
    assert sorted(halves) == sorted(whole)
    assert {d for d, *_ in requests(1, 2)} == {d for d, *_ in whole if d % 2 == 1}


def test_the_samples_file_holds_each_record_once(synthetic, tmp_path):
    from harness import run_cli

    folder, info = synthetic
    proc = run_cli(
        [
            "--model",
            "dummy",
            "--tasks",
            "belief_mp_zeroshot",
            "--metadata",
            json.dumps(meta(folder)),
            "--output_path",
            str(tmp_path),
            "--log_samples",
        ],
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.rglob("samples_belief_mp_zeroshot_*.jsonl")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == info["pairs"]
    for s in lines:
        names = s["metrics"]
        assert names[0] == "acc" and isinstance(s["acc"], dict)
        assert all(s[n] == "<same as acc>" for n in names[1:])
    # docs/scale.md's merge recipe on one shard: the records read back give the harness's numbers
    from belief_tasks.report.loading import read_samples
    from belief_tasks.scoring import belief_icl as SC

    results = json.loads(next(tmp_path.rglob("results_*.json")).read_text())["results"]["belief_mp_zeroshot"]
    records = read_samples(path)["acc"]
    for name, declared in SC.METRICS.items():
        agg = declared.aggregation
        assert agg(records) == pytest.approx(results[f"{name},none"], nan_ok=True), name
    # the report reads every metric's records back and recomputes the harness's numbers
    from belief_tasks.report import build_report

    report = build_report([tmp_path], tmp_path / "report")
    assert report.mismatched == [] and report.checked >= 9


def test_relation_shards_pooled_in_any_order_give_the_numbers_of_one_run():
    """docs/scale.md, "Splitting a run across machines": machines take blocks of relations
    (``relations``), and the pooled records give exactly the unsharded numbers, in any order
    (records carry their place in the data). Answers are made up per prompt (no model): right for
    two thirds of the prompts."""
    from belief_tasks.data import load_facts
    from belief_tasks.facts.seeding import derive_seed
    from belief_tasks.options import parse_options
    from belief_tasks.scoring import belief_icl as SC
    from belief_tasks.tasks import belief_icl as B

    base = {"source": "sample", "confidence_samples": 0, "accuracy_draws": 500, "mp_templates": "all"}

    def records(meta: dict) -> list[dict]:
        out = []
        for doc in B.build_docs("mp", "4relation", parse_options(B.OPTIONS, meta)):
            answers = [
                doc["target"] if derive_seed(0, p["template_id"], p["subject_form"]) % 3 else "nothing"
                for p in (B.prompt_ids(doc, j) for j in range(len(doc["templates"]) * len(doc["subjects"])))
            ]
            out.append(B.process_results(doc, answers)["acc"])
        return out

    def prompts(meta: dict) -> list[str]:
        opts = parse_options(B.OPTIONS, meta)
        return [p["prompt"] for d in B.build_docs("mp", "4relation", opts) for p in B.prompts_of(d, opts)]

    relations = list(load_facts("myriadlama", base).relations)
    blocks = [{**base, "relations": ",".join(block)} for block in (relations[:5], relations[5:])]
    # the same prompts: demonstrations come from every fact of the data, not only a shard's
    assert prompts(blocks[0]) + prompts(blocks[1]) == prompts(base)
    whole = records(base)
    first, second = records(blocks[0]), records(blocks[1])
    assert first + second == whole
    # any order: shards pooled the other way round, or gathered rank by rank (documents i mod 2)
    for pooled in (first + second, second + first, whole[0::2] + whole[1::2]):
        for name, declared in SC.METRICS.items():
            agg = declared.aggregation
            if name == "ovconf":
                continue  # no samples asked for
            assert agg(pooled) == agg(whole), name
            se = declared.stderr_function
            if se is not None:
                assert se(pooled) == se(whole), name
    assert 0.5 < SC.agg_acc(whole) < 0.8


def test_as_split_gives_lm_eval_a_plain_list_shaped_like_dataset_rows():
    from belief_tasks.options import KnobError
    from belief_tasks.tasks.base import as_split, unpack

    docs = [{"id": "a", "options": ["x", "y"]}, {"id": "b", "options": ["z"], "extra": {"k": 1}}]
    split = as_split(docs)["test"]
    # what ConfigurableTask reads of a datasets.Dataset: len, indexing, iteration, feature names
    assert len(split) == 2 and list(split) == [split[0], split[1]]
    assert list(split.features) == ["id", "options", "extra"]
    # as a Dataset row: every field in every doc, nested values as JSON strings
    assert split[0] == {"id": "a", "options": '["x", "y"]', "extra": None}
    assert unpack(split[0], "options") == ["x", "y"] and unpack(split[1], "extra") == {"k": 1}
    assert unpack(split[1], "id") == "b" and unpack({"v": ["kept"]}, "v") == ["kept"]
    with pytest.raises(KnobError, match="relations"):
        as_split([])


def test_system_instruction_and_chat_template_wrap_every_prompt_of_a_pair(model_path):
    """``doc_to_text`` is a slot that lm-eval wraps once per pair; each prompt takes its place."""
    import belief_tasks

    belief_tasks.install()
    from lm_eval.tasks import TaskManager
    from transformers import AutoTokenizer

    from belief_tasks.paths import task_yamls_dir
    from belief_tasks.tasks import belief_icl as B

    tok = AutoTokenizer.from_pretrained(str(model_path))

    def chat(messages, add_generation_prompt=True):
        return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    meta = {"source": "sample", "relations": "P36", "max_facts_per_relation": 2, "confidence_samples": 2}
    tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=meta)
    task = next(iter(tm.load(["belief_qa_4relation"])["tasks"].values()))
    task.build_all_requests(
        rank=0, world_size=1, apply_chat_template=True, chat_template=chat, system_instruction="Answer briefly."
    )
    greedy = [i for i in task.instances if not i.args[1]["do_sample"]]
    expected = [
        chat([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": p["prompt"]}])
        for d in B.build_docs("qa", "4relation", task.options)
        for p in B.prompts_of(d, task.options)
    ]
    assert [i.args[0] for i in greedy] == expected and len(expected) > 4
    assert not any(B.PROMPT_SLOT in i.args[0] for i in task.instances)
