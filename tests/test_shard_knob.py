"""Relation shards (``facts.shard``, the ``shard`` knob): the cut of a task's relations into N blocks, and the
documents of N shards together being the documents of one run, every draw included (docs/scale.md).

The cut is checked against every cut of small cases (the lightest heaviest block, the earliest on ties); the documents
on the bundled sample, built as lm-eval builds a task (no model: the tasks here need no tokenizer).
"""

from __future__ import annotations

import itertools
import json
import random

import pytest

from belief_tasks.facts.shard import ShardCutError, block, cut, relation_counts
from belief_tasks.options import KnobError, Options, parse_options


def all_cuts(m: int, n: int):
    for starts in itertools.combinations(range(1, m), n - 1):
        bounds = (0, *starts, m)
        yield [(bounds[i], bounds[i + 1]) for i in range(n)]


def heaviest(weights: list[int], blocks) -> int:
    return max(sum(weights[s:e]) for s, e in blocks)


def test_cut_by_hand():
    # 5 | 1 1 1 | 5 1: the heaviest block weighs 6 (no cut into 3 does better: 5+1 ... each side holds a 5)
    assert cut([5, 1, 1, 1, 5, 1], 3) == [(0, 1), (1, 4), (4, 6)]
    assert cut([1] * 7, 3) == [(0, 2), (2, 4), (4, 7)]  # 2, 2, 3: the earliest of the cuts with 3 at most
    assert cut([10, 1, 1, 1], 2) == [(0, 1), (1, 4)]
    assert cut([3, 3], 1) == [(0, 2)]
    assert cut([1, 1], 2) == [(0, 1), (1, 2)]


def test_cut_is_the_lightest_and_earliest_of_every_cut():
    rng = random.Random(0)
    for _ in range(300):
        m = rng.randint(1, 9)
        n = rng.randint(1, m)
        weights = [rng.randint(1, 20) for _ in range(m)]
        found = cut(weights, n)
        assert [e - s for s, e in found] == [e - s for s, e in found if e > s]  # no empty block
        assert found[0][0] == 0 and found[-1][1] == m
        assert all(a[1] == b[0] for a, b in zip(found, found[1:]))
        best = min(heaviest(weights, c) for c in all_cuts(m, n))
        assert heaviest(weights, found) == best


def test_more_blocks_than_relations_is_refused():
    with pytest.raises(ShardCutError):
        cut([1, 2], 3)
    with pytest.raises(ShardCutError):
        cut([1, 2], 0)


def test_blocks_cover_the_relations_once_in_their_order():
    counts = relation_counts(["P1", "P1", "P2", "P3", "P3", "P3", "P4"])
    assert counts == {"P1": 2, "P2": 1, "P3": 3, "P4": 1}
    blocks = [block(counts, k, 3) for k in (1, 2, 3)]
    assert [r for b in blocks for r in b] == ["P1", "P2", "P3", "P4"]
    assert blocks == [["P1", "P2"], ["P3"], ["P4"]]


@pytest.mark.parametrize(
    "value, expected",
    [("2/4", (2, 4)), ("1/1", (1, 1)), ([3, 5], (3, 5)), (" 2 / 3 ", (2, 3)), ("none", None), ("", None)],
)
def test_shard_knob_parses(value, expected):
    assert parse_options(Options, {"shard": value}).shard == expected


@pytest.mark.parametrize("value", ["0/4", "5/4", "2", "a/b", "2/4/1", [1, 2, 3], True, 2.5])
def test_shard_knob_refuses(value):
    with pytest.raises(KnobError, match="'shard'.*K/N"):
        parse_options(Options, {"shard": value})


def docs_of(task_name: str, metadata: dict) -> tuple[list[dict], dict]:
    """A task's documents and its metadata, built as lm-eval builds it (no model)."""
    import belief_tasks

    belief_tasks.install()
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    tm = TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=metadata)
    task = next(iter(tm.load([task_name])["tasks"].values()))
    return [dict(d) for d in task.eval_docs], task.config.metadata


@pytest.mark.parametrize(
    "task_name, metadata",
    [
        ("belief_bear", {"budget": 0.2}),  # a budget's draw: per relation, before the cut
        ("belief_mp_4template", {"max_facts_per_relation": 3, "confidence_prompts": 7}),  # the confidence subsample
        ("belief_qa_zeroshot", {}),
    ],
    ids=["bear-budget", "belief-confidence", "belief-qa"],
)
def test_the_shards_documents_are_one_runs(task_name, metadata):
    meta = {"source": "sample", **metadata}
    whole, whole_meta = docs_of(task_name, meta)
    parts, metas = [], []
    for k in (1, 2, 3):
        docs, md = docs_of(task_name, {**meta, "shard": f"{k}/3"})
        parts.append(docs)
        metas.append(md)
        assert md["shard_relations"] == list(dict.fromkeys(d["relation"] for d in docs))
    # together, in shard order: every document of the run, each once, in its order (a budgeted draw, BELIEF's
    # sampled prompts and demonstrations are drawn over all relations before the cut)
    assert [d for docs in parts for d in docs] == whole
    sizes = [len(docs) for docs in parts]
    assert min(sizes) > 0 and max(sizes) <= len(whole) / 2
    if "budget" in metadata:
        design = whole_meta["budget_design"]
        pooled = {r: v for md in metas for r, v in md["budget_design"]["relations"].items()}
        assert pooled == design["relations"] and list(pooled) == list(design["relations"])
        assert sum(md["budget_design"]["facts_drawn"] for md in metas) == design["facts_drawn"]
    if "confidence_prompts" in metadata:
        sampled = [d["fact_id"] for d in whole if d["sampled"] is not None]
        assert len(sampled) == 7
        assert [d["fact_id"] for docs in parts for d in docs if d["sampled"] is not None] == sampled
    assert "shard_relations" not in whole_meta


def test_more_shards_than_relations_is_refused_when_the_task_is_built():
    from belief_tasks.facts.schema import SchemaError

    with pytest.raises(SchemaError, match="'shard'.*12 relations.*at most 12 shards"):
        docs_of("belief_bear", {"source": "sample", "shard": "13/13"})


def test_relations_knob_then_shard():
    whole, _ = docs_of("belief_bear", {"source": "sample", "relations": "P36,P17,P37", "templates": "0"})
    first, md = docs_of(
        "belief_bear", {"source": "sample", "relations": "P36,P17,P37", "templates": "0", "shard": "1/2"}
    )
    second, _ = docs_of(
        "belief_bear", {"source": "sample", "relations": "P36,P17,P37", "templates": "0", "shard": "2/2"}
    )
    assert first + second == whole
    assert md["relations"] == "P36,P17,P37"  # the user's knob stays as given
    assert json.dumps(md["shard_relations"]) == json.dumps(list(dict.fromkeys(d["relation"] for d in first)))


BASE = ["--model", "hf", "--model_args", "pretrained=/nonexistent/model", "--tasks", "belief_bear"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--log_samples", "--shard_by_relation", "2"], "needs --output_path FOLDER"),
        (["--output_path", "OUT", "--shard_by_relation", "2"], "needs --log_samples"),
        (["--output_path", "OUT", "--log_samples", "--limit", "3", "--shard_by_relation", "2"], "with --limit"),
        (["--output_path", "OUT", "--log_samples", "--shard_by_relation", "two"], "give the number of shards"),
        (
            ["--output_path", "OUT", "--log_samples", "--metadata", '{"shard": "1/2"}', "--shard_by_relation=2"],
            "with the shard knob",
        ),
    ],
    ids=["no-output", "no-samples", "limit", "not-a-number", "knob-too"],
)
def test_shard_by_relation_refuses_what_cannot_pool(tmp_path, extra, message):
    """Refused in one paragraph before anything runs: nothing is written."""
    from harness import run_cli

    args = [a.replace("OUT", str(tmp_path / "out")) for a in BASE + extra]
    proc = run_cli(args, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("belief-eval:")]
    assert message in line and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_shard_args_add_the_knob_and_the_folder():
    from pathlib import Path

    from belief_tasks.commands.shard_run import finished, shard_args

    args = ["--tasks", "t", "--metadata", '{"budget": 0.1}', "--output_path=o", "--log_samples"]
    got = shard_args(args, 2, 3, Path("o/shards/2-of-3"))
    assert got[:3] == ["--tasks", "t", "--log_samples"]
    assert json.loads(got[got.index("--metadata") + 1]) == {"budget": 0.1, "shard": "2/3"}
    assert got[got.index("--output_path") + 1] == "o/shards/2-of-3"
    assert "o" not in got and "--output_path=o" not in got
    assert json.loads(shard_args(["--tasks", "t"], 1, 1, Path("x"))[3]) == {"shard": "1/1"}
    assert not finished(Path("/nonexistent"), got)


def test_a_task_not_ours_is_refused_by_the_first_shard_before_the_model_loads(tmp_path):
    """The knob splits our tasks only: another harness task would run whole in every shard and never pool."""
    from harness import run_cli

    (tmp_path / "docs.jsonl").write_text('{"q": "one"}\n{"q": "two"}\n')
    (tmp_path / "plain.yaml").write_text(
        "task: plain_task\ndataset_path: json\ndataset_kwargs:\n"
        f"  data_files:\n    test: {tmp_path / 'docs.jsonl'}\n"
        'test_split: test\noutput_type: multiple_choice\ndoc_to_text: "{{q}}"\ndoc_to_choice: ["a", "b"]\n'
        "doc_to_target: 0\nmetric_list:\n  - metric: acc\n"
    )
    out = tmp_path / "out"
    args = [*BASE[:-1], "belief_bear,plain_task", "--include_path", str(tmp_path), "--metadata", '{"source": "sample"}']
    proc = run_cli([*args, "--output_path", str(out), "--log_samples", "--shard_by_relation", "2"], timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "cuts only our tasks by relation, and plain_task would run whole in every shard" in proc.stderr
    assert "Traceback" not in proc.stderr and not list(out.rglob("results_*.json"))
