"""Instruct models: BELIEF-ICL demonstrations as chat turns (``--apply_chat_template --fewshot_as_multiturn``)."""

from __future__ import annotations

import pytest

from belief_tasks.prompts import belief as P

from harness import evaluate


def test_chat_turns_by_hand():
    demos = [
        P.Demonstration("f1", "t", "[MASK] is the capital of France.", "Paris"),
        P.Demonstration("f2", "t", "[MASK] is the capital of Italy.", "Rome."),
    ]
    turns = P.chat_turns("mp", demos, "[MASK] is the capital of Spain.")
    assert turns == [
        {
            "role": "user",
            "content": "Predict the [MASK] in each sentence in one word.\nQ: [MASK] is the capital of France.",
        },
        {"role": "assistant", "content": "A: Paris."},
        {"role": "user", "content": "Q: [MASK] is the capital of Italy."},
        {"role": "assistant", "content": "A: Rome."},
        {"role": "user", "content": "Q: [MASK] is the capital of Spain."},
    ]
    # the raw prompt holds the same lines, in the same order
    raw = P.render("mp", demos, "[MASK] is the capital of Spain.")
    assert raw.split("\n") == [line for t in turns for line in t["content"].split("\n")] + ["A:"]
    zero = P.chat_turns("qa", [], "What is the capital of Spain?")
    assert zero == [{"role": "user", "content": "Answer each question in one word.\nQ: What is the capital of Spain?"}]


def _acc(model_path, **chat):
    res = evaluate(
        ["belief_demo_qa_4template"],
        f"pretrained={model_path},dtype=float32,device=cpu",
        model="hf-shared",
        metadata={"confidence_samples": 0},
        limit=8,
        batch_size=8,
        **chat,
    )
    records = [s["acc"] for s in res["samples"]["belief_demo_qa_4template"]]
    prompts = sum(len(r["answers"]) for r in records)
    return res["results"]["belief_demo_qa_4template"]["coverage_average,none"], prompts, records


@pytest.mark.e2e
def test_multiturn_demonstrations_keep_an_instruct_model_answering(model_path):
    # 8 pairs of the sample's QA 4-template prompts (68 prompts): one user turn echoes demonstration answers
    # (0.02 measured), demonstrations as turns answer (0.22 measured; 3 other pairs gave 0.00 and 0.27 earlier)
    multi, prompts, records = _acc(model_path, apply_chat_template=True, fewshot_as_multiturn=True)
    single, _, _ = _acc(model_path, apply_chat_template=True, fewshot_as_multiturn=False)
    assert prompts >= 60 and multi >= 0.2 and multi > single
    assert all(not a.startswith("A:") for r in records for a in r["answers"])  # extracted as from raw prompts
