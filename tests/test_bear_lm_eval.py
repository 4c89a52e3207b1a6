"""lm-eval's own ``bear`` task beside ``belief_bear`` (``scripts/compare_lm_eval_bear.py``, docs/bear.md "Comparison
with lm-eval's built-in bear task"), on the bundled sample: the hub-layout copy lm-eval's task reads, the
decomposition of the headline gap by hand, and both tasks side by side on the bundled model.

The instances: relation P37 of the sample, 2 facts drawn with seed 8 (Brazil: Portuguese; Pakistan: Urdu and
English, a fact with two objects), 4 statement templates each, 52 answer options.
"""

from __future__ import annotations

import importlib.util

import pytest

from harness import ROOT

ARGS = ["--sample", "--relations", "P37", "--per-relation", "2", "--seed", "8"]


def compare_module():
    spec = importlib.util.spec_from_file_location("compare_lm_eval_bear", ROOT / "scripts" / "compare_lm_eval_bear.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """(module, fact set, our metadata, fact_of, lm-pub-quiz folder, lm-eval task folder) for ARGS."""
    c = compare_module()
    args = c.argparse.Namespace(sample=True, relations="P37", per_relation=2, seed=8, bear_path=None)
    return (c, *c.prepare(args, tmp_path_factory.mktemp("bear_lm_eval")))


def test_lm_eval_bear_reads_our_instances_from_the_hub_layout(prepared):
    """lm-eval's own bear.yaml, included with only dataset_path (and its cache) changed, loads the local copy: one
    doc per (fact, template), the statements our renderer gives, the first object as its one ``correct``."""
    from lm_eval.tasks import TaskManager

    from belief_tasks.prompts.bear import statement

    c, fs, meta, fact_of, lpq, tasks_dir = prepared
    assert list(fact_of.values()) == [f.id for f in c.selected_facts(meta)[1]]
    task = TaskManager(include_path=str(tasks_dir)).load([c.LOCAL_TASK])["tasks"][c.LOCAL_TASK]
    config = task.config
    assert (config.output_type, config.doc_to_text, config.target_delimiter) == ("multiple_choice", "", "")
    docs = list(task.test_docs())
    rel = fs.relations["P37"]
    options = [e.label for e in rel.answer_space]
    assert len(docs) == 2 * 4 and len(options) == 52
    expected = [(s, t) for s in ("Brazil", "Pakistan") for t in range(4)]
    assert [(d["subject"], d["template_index"]) for d in docs] == expected
    for d in docs:
        template = rel.templates_of("statement")[d["template_index"]].text
        assert task.doc_to_choice(d) == [statement(template, d["subject"], a) for a in options]
        assert task.doc_to_text(d) == ""
    pakistan = docs[-1]
    assert options[task.doc_to_target(pakistan)] == "Urdu"  # its first object; English is not gold here


def test_decomposition_by_hand():
    """acc - bear = scores + gold + pooling, on three hand-made rows (option scores, one gold for lm-eval, all golds
    for us); the tie rule is the first maximum in both."""
    c = compare_module()
    theirs = {
        ("f1", 0): {"ll": [-1.0, -2.0, -3.0], "gold": 0, "acc": 1.0},  # right in both
        ("f2", 0): {"ll": [-2.0, -1.0, -1.0], "gold": 2, "acc": 0.0},  # gold tied for best, not first: lost
        ("f3", 1): {"ll": [-1.5, -1.0, -3.0], "gold": 0, "acc": 0.0},
    }
    ours = {
        ("f1", 0): {"record": {"ll": [-1.0, -2.0, -3.0], "gold": [0], "pred": 0, "template_index": 0}},
        ("f2", 0): {"record": {"ll": [-2.0, -1.0, -1.0], "gold": [2], "pred": 1, "template_index": 0}},
        ("f3", 1): {"record": {"ll": [-1.5, -1.0, -3.0], "gold": [0, 1], "pred": 1, "template_index": 1}},
    }
    for rows in (theirs, ours):
        for k in rows:
            rows[k].update(options=["a", "b", "c"], texts=["A", "B", "C"], requests=[("", "A"), ("", "B"), ("", "C")])
    # ours: p_at_1 pooled = 2/3 (f1, and f3 accepts its second object); bear = mean(t0: 1/2, t1: 1) = 3/4
    row = c.decompose(theirs, ours, {"p_at_1,none": 2 / 3, "bear,none": 0.75})
    assert row["acc_lm_eval"] == pytest.approx(1 / 3) and row["a1"] == pytest.approx(1 / 3)
    assert (row["d_scores"], row["d_gold"], row["d_pooling"]) == pytest.approx((0.0, 1 / 3 - 2 / 3, 2 / 3 - 0.75))
    assert row["gap"] == pytest.approx(row["d_scores"] + row["d_gold"] + row["d_pooling"])
    assert (row["tied_rows"], row["tied_rows_with_gold"]) == (1, 1)
    assert (row["acc_ties_lost"], row["acc_ties_won"]) == pytest.approx((1 / 3, 2 / 3))
    assert (row["agreement"], row["rows_with_several_golds"], row["rows_with_empty_context"]) == (1.0, 1, 3)


@pytest.mark.e2e
def test_side_by_side_on_the_bundled_model(prepared, model_path):
    """Both tasks in one run on stock hf (float32), the first 6 rows of each (Brazil x 4 templates, Pakistan x 2).
    The same requests, ("", statement), so the same scores and predictions; the headline numbers differ by the gold
    (lm-eval grades Pakistan by Urdu alone, the model says English on both of its rows) and by pooling (--limit cut
    Pakistan's templates 2 and 3, so pooled rows weigh templates 0 and 1 twice)."""
    c, fs, meta, fact_of, lpq, tasks_dir = prepared
    row = c.compare(fs, meta, fact_of, tasks_dir, model_path, "float32", batch_size=32, limit=6)["row"]
    assert row["rows"] == 6 and row["rows_per_template"] == {0: 2, 1: 2, 2: 1, 3: 1}
    assert row["acc_lm_eval_reported"] == pytest.approx(1 / 6) and row["acc_lm_eval"] == pytest.approx(1 / 6)
    # Brazil right under one of templates 0, 1 and Pakistan (any object) under both: t0, t1 = 2/2, 1/2; t2, t3 = 0
    assert (row["p_at_1"], row["bear"]) == pytest.approx((3 / 6, (1 + 1 / 2 + 0 + 0) / 4))
    assert (row["d_scores"], row["d_gold"], row["d_pooling"]) == pytest.approx((0.0, -2 / 6, 0.125))
    assert (row["agreement"], row["max_abs_ll_diff"], row["tied_rows"]) == (1.0, 0.0, 0)
    other = (row["rows_with_other_statements"], row["rows_with_other_options"], row["rows_with_other_requests"])
    assert other == (0, 0, 0)
    assert (row["rows_with_empty_context"], row["rows_with_several_golds"]) == (6, 2)
