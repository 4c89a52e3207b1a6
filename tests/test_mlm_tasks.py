"""belief_mlm_* tasks: single-token filtering, content-free docs, harness and CLI runs on a tiny BERT."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_mlm_tiny import build_tiny_mlm, norm_words

from harness import evaluate, read_results, run_cli

SAMPLE = {"source": "sample"}


def _opts(**metadata):
    """The encoder family's knobs parsed from the sample's metadata, as its task parses them."""
    from belief_tasks.options import parse_options
    from belief_tasks.tasks.belief_mlm import OPTIONS

    return parse_options(OPTIONS, {**SAMPLE, **metadata})


@pytest.fixture(scope="module")
def favour_paris(tmp_path_factory):
    """A tiny BERT that predicts "paris" at every mask with probability ~1."""
    return build_tiny_mlm(tmp_path_factory.mktemp("tiny_paris"), favour="paris")


def expected_counts(folder, relations):
    """Independent count: a fact is kept iff one of its accepted expressions is one whole vocabulary word."""
    from belief_tasks.data import load_facts

    vocab = set((folder / "vocab.txt").read_text().split())
    fs = load_facts("myriadlama", SAMPLE)
    kept = dropped = 0
    paris_facts = kept_facts = 0
    for f in fs:
        if f.relation not in relations:
            continue
        # every template (statements and question-style ones, v1's prompts) x every subject expression
        n = len(fs.relations[f.relation].templates) * len(f.subject.expressions)
        single = [e for e in f.object_expressions if len(w := norm_words(e)) == 1 and w[0] in vocab]
        if single:
            kept, kept_facts = kept + n, kept_facts + 1
            paris_facts += "paris" in [norm_words(e)[0] for e in single]
        else:
            dropped += n
    return kept, dropped, kept_facts, paris_facts


def test_prompt_docs_keep_only_single_token_objects(favour_paris):
    from belief_tasks.tasks.belief_mlm import prompt_docs

    docs, counts = prompt_docs("myriadlama", _opts(pretrained=str(favour_paris)))
    relations = set(counts)
    kept, dropped, kept_facts, _ = expected_counts(favour_paris, relations)
    assert len(docs) == kept == sum(c["kept"] for c in counts.values())
    assert sum(c["dropped"] for c in counts.values()) == dropped
    assert kept > 0 and dropped > 0  # the tiny vocabulary holds half of the objects
    assert len({(d["relation"], d["fact_id"]) for d in docs}) == kept_facts
    for d in docs:
        assert d["prompt"].count("[MASK]") == 1 and "[X]" not in d["prompt"]
        assert all(len(norm_words(a)) == 1 for a in d["accepted"])


def test_prompt_docs_need_the_tokenizer():
    from belief_tasks.tasks.belief_mlm import prompt_docs

    with pytest.raises(ValueError, match="pretrained"):
        prompt_docs("myriadlama", _opts())


def test_knobs_and_the_mask_token_are_checked_before_model_time(favour_paris, model_path):
    from belief_tasks.options import KnobError, parse_options
    from belief_tasks.tasks.belief_mlm import OPTIONS, mlm_tokenizer

    assert (
        parse_options(OPTIONS, {}).accuracy_draws == 50_000
        and parse_options(OPTIONS, {"accuracy_draws": "7"}).accuracy_draws == 7
    )
    with pytest.raises(KnobError, match="accuracy_draws"):
        _opts(pretrained=str(favour_paris), accuracy_draws=0)
    assert mlm_tokenizer({"pretrained": str(favour_paris)}).mask_token == "[MASK]"
    with pytest.raises(KnobError, match="no mask token"):  # the bundled causal LM
        mlm_tokenizer({"pretrained": str(model_path)})


def test_bias_docs_are_content_free_with_single_token_candidates(favour_paris):
    from belief_tasks.tasks.belief_mlm import bias_docs

    docs = bias_docs("myriadlama", _opts(pretrained=str(favour_paris), relations="P36"))
    assert {d["subject_form"] for d in docs} == {"na", "empty", "qmark"}
    assert any("N/A" in d["prompt"] for d in docs) and any("?" in d["prompt"] for d in docs)
    vocab = set((favour_paris / "vocab.txt").read_text().split())
    for d in docs:
        assert len(d["candidates"]) >= 2 and all(norm_words(c)[0] in vocab for c in d["candidates"])
        assert "  " not in d["prompt"]


@pytest.mark.e2e
def test_harness_run_on_a_tiny_bert(favour_paris):
    relations = ("P36", "P37")
    res = evaluate(
        ["belief_mlm"],
        f"pretrained={favour_paris},dtype=float32",
        model="hf-mlm",
        batch_size=32,
        metadata={"pretrained": str(favour_paris), "relations": ",".join(relations), "accuracy_draws": 2000},
    )
    main, bias = res["results"]["belief_mlm_myriadlama"], res["results"]["belief_mlm_bias_myriadlama"]
    kept, dropped, kept_facts, paris_facts = expected_counts(favour_paris, relations)
    assert (main["prompts_kept,none"], main["prompts_dropped,none"]) == (kept, dropped)
    assert main["sample_len"] == kept
    samples = res["samples"]["belief_mlm_myriadlama"]
    records = [s["acc@1"] for s in samples]
    assert {r["pred"] for r in records} == {"paris"}  # the favoured token wins every mask
    assert all(r["fact_key"]["key"].startswith(r["relation"] + "|") for r in records)  # the cross-dataset key
    # so a fact is right exactly when Paris is among its objects, whatever the prompt
    assert paris_facts >= 1
    assert main["acc@1,none"] == pytest.approx(paris_facts / kept_facts)
    assert main["acc@1_range,none"] == pytest.approx(0.0, abs=1e-12)
    assert main["acc@1_sd,none"] == pytest.approx(0.0, abs=1e-12)
    assert main["consist,none"] == 1.0
    assert main["acc@1,none"] <= main["mrr,none"] <= 1 and main["acc@1,none"] <= main["acc@10,none"]
    mean_conf = sum(r["confidence"] for r in records) / len(records)
    assert mean_conf > 0.99
    # Overconf is over prompts: mean confidence - share of prompts whose gold is ranked first
    right = [r["gold"] == "paris" for r in records]
    assert [r["gold_rank"] == 1 for r in records] == right
    assert main["overconf@1,none"] == pytest.approx(mean_conf - sum(right) / len(right), abs=1e-6)
    # one logged prompt against a direct forward pass
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(favour_paris), AutoModelForMaskedLM.from_pretrained(favour_paris)
    s = next(s for s in samples if s["acc@1"]["gold"] != "paris")
    ids = tok(s["arguments"][0][0])["input_ids"]
    with torch.no_grad():
        lp = model(input_ids=torch.tensor([ids])).logits[0, ids.index(tok.mask_token_id)].log_softmax(-1)
    gold = tok.convert_tokens_to_ids(s["acc@1"]["gold"])
    assert s["acc@1"]["gold_rank"] == int((lp > lp[gold]).sum()) + 1
    assert s["acc@1"]["confidence"] == pytest.approx(math.exp(float(lp.max())), rel=1e-5)
    # bias: P36's candidates include Paris, which takes all the mass; P37's (languages) do not
    assert bias["bias_single,none"] > 0.4 and bias["bias_multi,none"] > 0.4
    per_rel = {}
    for s in res["samples"]["belief_mlm_bias_myriadlama"]:
        per_rel.setdefault(s["bias_single"]["relation"], []).append(s["bias_single"])
    from belief_tasks.metrics.belief_mlm import bias_single
    from belief_tasks.scoring.belief_mlm import bias_columns

    assert bias_single(*bias_columns(per_rel["P36"])) > 0.95


@pytest.mark.e2e
def test_belief_eval_cli_runs_hf_mlm(favour_paris, tmp_path):
    """`belief-eval --model hf-mlm`: the tokenizer reaches the task through the CLI's model args."""
    out = run_cli(
        [
            "--model",
            "hf-mlm",
            "--model_args",
            f"pretrained={favour_paris},dtype=float32",
            "--tasks",
            "belief_mlm_myriadlama",
            "--batch_size",
            "32",
            "--output_path",
            str(tmp_path),
            "--metadata",
            json.dumps({**SAMPLE, "relations": "P36", "max_facts_per_relation": 3, "accuracy_draws": 500}),
        ],
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = read_results(tmp_path)["results"]["belief_mlm_myriadlama"]
    assert res["prompts_kept,none"] > 0 and 0.0 <= res["acc@1,none"] <= 1.0
    assert "acc@1" in out.stdout and "overconf@10" in out.stdout


def test_statement_only_templates_on_request(favour_paris):
    from belief_tasks.data import load_facts
    from belief_tasks.tasks.belief_mlm import prompt_docs

    fs = load_facts("myriadlama", SAMPLE)
    questions = {t.id for r in fs.relations.values() for t in r.templates_of("question")}
    everything, _ = prompt_docs("myriadlama", _opts(pretrained=str(favour_paris)))
    statements, _ = prompt_docs("myriadlama", _opts(pretrained=str(favour_paris), mlm_templates="statement"))
    assert {d["template_id"] for d in everything} & questions  # question-style prompts: "...? [MASK]."
    assert not {d["template_id"] for d in statements} & questions

    def prompts(docs):  # the per-relation counts differ, the prompts must not
        return [{k: v for k, v in d.items() if not k.startswith("relation_")} for d in docs]

    assert prompts(d for d in everything if d["template_id"] not in questions) == prompts(statements)
