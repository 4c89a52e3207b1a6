"""``reference: true``: IC-LKE as the authors' code (ZeroPrompt_LKE) builds and scores it (docs/iclke.md).

Expected strings, example orders and predictions are written down from the reference's code at the commit
docs/iclke.md names; "construct_prompt.py:N" and "LKEs.py:N" are lines of its ``latent_knowledge_extractor/``.
Relation 4 (the reference config's ``test_relation_id``) and relation 9 are facts we wrote ourselves, in
T-REx-MC's hub columns, their rows interleaved so that the reference's ``filter`` by ``Relation_ID`` matters.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from belief_tasks.facts.schema import Entity, Fact, SchemaError
from belief_tasks.metrics import iclke as M
from belief_tasks.options import KnobError, parse_options
from belief_tasks.prompts import iclke as P
from belief_tasks.tasks import iclke as T
from belief_tasks.tasks.base import unpack

TRAIN_4 = [
    ("France", "Paris"),
    ("Germany", "Berlin"),
    ("Italy", "Rome"),
    ("Spain", "Madrid"),
    ("Japan", "Tokyo"),
    ("Egypt", "Cairo"),
]
TRAIN_9 = [("France", "French"), ("Germany", "German"), ("Italy", "Italian")]
TEST_4 = [
    ("Norway", "Oslo"),
    ("Portugal", "Lisbon"),
    ("Austria", "Vienna"),
    ("Ireland", "Dublin"),
    ("Greece", "Athens"),
    ("Poland", "Warsaw"),
    ("Sweden", "Stockholm"),
    ("Finland", "Helsinki"),
    ("Hungary", "Budapest"),
    ("Denmark", "Copenhagen"),
    ("Belgium", "Brussels"),
    ("Chile", "Santiago"),
]
CHOICES = ["Helsinki", "Warsaw", "Bern"]


def _row(rid, subject, obj, choices):
    name = {4: "capital", 9: "official language"}[rid]
    return {
        "Relation_ID": rid,
        "Relation Name": name,
        "Subject": subject,
        "Object": obj,
        "Multiple Choices": repr(choices),
        "Title": subject,
        "Text": f"{subject} ...",
    }


def write_reference_fixture(folder, train_4=TRAIN_4):
    """Relation 4: the given training rows, 12 test rows (the reference scores the first 10); relation 9 between
    them. Test rows' choices: ``CHOICES`` without the gold; Portugal's list holds its gold (not as T-REx-MC's card
    says, which lists only the other choices), and Finland's gold Helsinki is one of ``CHOICES``."""
    train = []
    for i, (s, o) in enumerate(train_4):
        train.append(_row(4, s, o, CHOICES))
        if i < len(TRAIN_9):
            train.append(_row(9, *TRAIN_9[i], ["Polish", "Czech"]))
    test = [_row(9, "Spain", "Spanish", ["Polish", "Czech"])]
    for s, o in TEST_4:
        test.append(_row(4, s, o, ["Warsaw", "Lisbon", "Bern"] if s == "Portugal" else [c for c in CHOICES if c != o]))
    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in (("train", train), ("test", test)):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def _docs(folder, **knobs):
    md = {"trex_mc_path": str(folder), "reference": True, **knobs}
    return T.iclke_trex_mc(parse_options(T.OPTIONS, md))["test"].to_list()


# ---------------------------------------------------------------- the strings, the draw, the rows, the options


def test_reference_strings_on_a_hand_made_relation(tmp_path):
    docs = _docs(write_reference_fixture(tmp_path / "trex"), relations="4", n_examples=4)
    # construct_prompt.py:71: relation 4's 6 training rows (frame index 0-5, dataset order) sampled with
    # n=4, random_state=10: numpy's RandomState(10).permutation(6)[:4] = [2, 5, 0, 3], i.e. Italy, Egypt,
    # France, Spain, for every test fact of the relation
    assert list(np.random.RandomState(10).permutation(6)[:4]) == [2, 5, 0, 3]
    # construct_prompt.py:125-129: ', '.join(f"{s} : {o} ") + f"{x} : "
    head = "Italy : Rome , Egypt : Cairo , France : Paris , Spain : Madrid "
    norway = docs[0]
    assert norway["subject"] == "Norway" and norway["context"] == head + "Norway : "
    assert all(d["context"] == head + d["subject"] + " : " for d in docs)
    assert [d["n_examples"] for d in docs] == [4] * 10
    # construct_prompt.py:74-76: iloc[0:10] of relation 4's test rows, dataset order (Belgium, Chile are rows 11-12)
    assert [d["subject"] for d in docs] == [s for s, _ in TEST_4[:10]]
    # construct_prompt.py:138-143: Multiple Choices in dataset order, then the gold; LKEs.py:109 reads it last
    assert norway["options"] == json.dumps(["Helsinki", "Warsaw", "Bern", "Oslo"]) and norway["gold_index"] == 3
    # construct_prompt.py:147: f"{base_prompt} : {option}", the separator twice around the test subject's colon
    args = T.reference_requests(norway["context"], unpack(norway, "options"))
    assert [c + o for c, o in args[:4]] == [head + "Norway :  : " + y for y in ("Helsinki", "Warsaw", "Bern", "Oslo")]
    assert args[:4] == [(head + "Norway : ", " : " + y) for y in ("Helsinki", "Warsaw", "Bern", "Oslo")]
    # the last request: σ's trailing space, which lm-eval would otherwise score with every option
    assert args[4] == (head + "Norway :", " ") and len(args) == 5
    assert T.doc_to_text(norway) == norway["context"]
    assert {d["format"] for d in docs} == {"reference"}


def test_reference_options_keep_a_listed_gold_once_and_last(tmp_path):
    docs = {d["subject"]: d for d in _docs(write_reference_fixture(tmp_path / "trex"), relations="4")}
    # Portugal's Multiple Choices are ['Warsaw', 'Lisbon', 'Bern'] with its gold Lisbon listed: the reference
    # would append it again (construct_prompt.py:143), 4 options with Lisbon twice; ours keeps it once, last
    assert unpack(docs["Portugal"], "options") == ["Warsaw", "Bern", "Lisbon"] and docs["Portugal"]["gold_index"] == 2
    # Finland's gold Helsinki was never listed: dataset order, the gold appended
    assert unpack(docs["Finland"], "options") == ["Warsaw", "Bern", "Helsinki"]
    listed_last = Fact("t", "4", Entity("X"), (Entity("b"),), choices=("a", "c", "b"))
    assert P.reference_options(listed_last) == (["a", "c", "b"], 2)


def test_reference_draw_is_the_reference_s_pandas_call(tmp_path):
    """60 training rows of relation 4: our 50 examples are what the reference's own frame gives, built as
    construct_prompt.py:56-71 builds it (datasets' filter, to_pandas, sample)."""
    datasets = pytest.importorskip("datasets")
    train = [(f"Subject {i}", f"Object {i}") for i in range(60)]
    folder = write_reference_fixture(tmp_path / "trex", train)
    docs = _docs(folder, relations="4")
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    frame = datasets.Dataset.from_list(rows).filter(lambda e: e["Relation_ID"] == 4).to_pandas()
    drawn = frame.sample(n=50, random_state=10)
    pairs = " , ".join(f"{s} : {o}" for s, o in zip(drawn["Subject"], drawn["Object"]))
    assert all(d["context"] == f"{pairs} {d['subject']} : " for d in docs) and len(docs) == 10
    # pandas' sample is numpy's RandomState(random_state).choice(len, n, replace=False): a permutation's prefix
    assert list(drawn.index) == list(np.random.RandomState(10).permutation(60)[:50])
    assert [f"Subject {i}" for i in np.random.RandomState(10).permutation(60)[:50]] == list(drawn["Subject"])
    # another reference_seed is another draw by the same call
    other = _docs(folder, relations="4", reference_seed=11)[0]["context"]
    again = frame.sample(n=50, random_state=11)
    assert other.startswith(f"{again['Subject'].iloc[0]} : {again['Object'].iloc[0]} , ")


def test_fewer_training_rows_than_examples_and_zero_examples(tmp_path):
    folder = write_reference_fixture(tmp_path / "trex")
    import pandas as pd

    frame = pd.DataFrame({"Subject": [s for s, _ in TRAIN_4]})
    with pytest.raises(ValueError, match="larger sample than population"):  # the reference stops here
        frame.sample(n=50, random_state=10)
    # ours: the same call with n = 6, every row in pandas' order, which begins with the n=4 draw above
    doc = _docs(folder, relations="4")[0]
    order = [TRAIN_4[i] for i in np.random.RandomState(10).permutation(6)]
    assert doc["context"] == " , ".join(f"{s} : {o}" for s, o in order) + " Norway : " and doc["n_examples"] == 6
    # n_examples 0: construct_prompt.py:70 draws nothing ("if self.example_num:") and keeps every row, in order
    doc0 = _docs(folder, relations="4", n_examples=0)[0]
    assert doc0["context"] == " , ".join(f"{s} : {o}" for s, o in TRAIN_4) + " Norway : "


def test_reference_rows_and_budget_knobs(tmp_path):
    folder = write_reference_fixture(tmp_path / "trex")
    assert [d["subject"] for d in _docs(folder, relations="4", reference_rows=0)] == [s for s, _ in TEST_4]
    assert [d["subject"] for d in _docs(folder, relations="4", reference_rows=2)] == ["Norway", "Portugal"]
    capped = _docs(folder, relations="4", max_facts_per_relation=3)  # our seeded cap, among the first 10 rows
    assert len(capped) == 3 and {d["subject"] for d in capped} <= {s for s, _ in TEST_4[:10]}
    # relation 9: 3 training rows, 1 test row; its own draw
    (spain,) = _docs(folder, relations="9")
    order = [TRAIN_9[i] for i in np.random.RandomState(10).permutation(3)]
    assert spain["context"] == " , ".join(f"{s} : {o}" for s, o in order) + " Spain : "
    assert unpack(spain, "options") == ["Polish", "Czech", "Spanish"]


# ---------------------------------------------------------------- the score and the tie rule


def _reference_evaluate(scores):
    """LKEs.py:93-111 for one fact, transcribed: exp of each summed log-probability, normalised by their sum,
    ``index(max(...))``, the gold last."""
    probs = [np.exp(s) for s in scores]
    total = sum(probs)
    normalised = [p / total for p in probs]
    best = normalised.index(max(normalised))
    return best, best == len(normalised) - 1, normalised[-1]


def _reference_doc(tmp_path):
    return _docs(write_reference_fixture(tmp_path / "trex"), relations="4", n_examples=4)[0]  # Norway, 4 options


def test_scores_and_first_maximum_as_the_reference(tmp_path):
    doc = _reference_doc(tmp_path)
    # lm-eval's results: each option's log-likelihood includes σ's trailing space (-0.5), the last request
    results = [(-3.5, False), (-1.5, False), (-4.5, False), (-1.5, False), (-0.5, False)]
    rec = T.process_results(doc, results)["acc"]
    assert rec["logprobs"] == [-3.0, -1.0, -4.0, -1.0]
    # the reference: Warsaw (1) and Oslo (3, the gold) tie; index(max) takes Warsaw, so the fact is wrong
    best, correct, mass = _reference_evaluate([-3.0, -1.0, -4.0, -1.0])
    assert (best, correct) == (1, False)
    assert rec["prediction"] == 1 and rec["correct"] is False and M.is_correct(rec["logprobs"], 3) is False
    # gold mass, by hand: e^-1 / (e^-3 + e^-1 + e^-4 + e^-1)
    by_hand = math.exp(-1) / (math.exp(-3) + 2 * math.exp(-1) + math.exp(-4))
    assert rec["gold_prob"] == pytest.approx(by_hand, rel=1e-12) and mass == pytest.approx(by_hand, rel=1e-12)
    assert rec["template_id"] == "iclke-reference"
    # no tie: the gold wins in both
    rec2 = T.process_results(doc, [(-3.5, False), (-2.5, False), (-4.5, False), (-1.5, False), (-0.5, False)])["acc"]
    assert rec2["prediction"] == 3 and rec2["correct"] is True
    assert _reference_evaluate(rec2["logprobs"])[:2] == (3, True)


def test_first_maximum_and_ties_wrong_agree_when_the_gold_is_last():
    rng = np.random.default_rng(0)
    for _ in range(500):
        lp = list(rng.integers(-4, 0, size=5).astype(float))  # small integers: many ties
        gold = len(lp) - 1
        assert (M.first_maximum(lp) == gold) == M.is_correct(lp, gold) == _reference_evaluate(lp)[1]
    assert M.first_maximum([-1.0, -1.0, -2.0]) == 0 and M.prediction([-1.0, -1.0, -2.0]) is None


def test_all_options_underflowing(tmp_path):
    """Summed log-probabilities below about -745 nats: ``np.exp`` gives 0 for each, the reference divides 0 by 0
    (NaN probabilities, NaN prob mass, option 0 predicted, since max() keeps its first NaN). Ours normalises
    with the maximum taken out first, so the numbers stay defined."""
    scores = [-800.0, -760.0, -900.0, -750.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        best, correct, mass = _reference_evaluate(scores)
    assert best == 0 and correct is False and math.isnan(mass)
    rec = T.process_results(_reference_doc(tmp_path), [(s - 1.0, False) for s in scores] + [(-1.0, False)])["acc"]
    assert rec["logprobs"] == scores and rec["prediction"] == 3 and rec["correct"] is True
    by_hand = 1 / (1 + math.exp(-50) + math.exp(-10) + math.exp(-150))
    assert rec["gold_prob"] == pytest.approx(by_hand, rel=1e-12) and rec["pred_prob"] == rec["gold_prob"]
    # where exp does not underflow, ours is the reference's normalisation
    _, _, mass = _reference_evaluate([-30.0, -12.5, -40.0, -11.0])
    assert M.gold_confidence([-30.0, -12.5, -40.0, -11.0], 3) == pytest.approx(mass, rel=1e-12)


# ---------------------------------------------------------------- refused before the model loads


def test_reference_refusals(tmp_path):
    folder = write_reference_fixture(tmp_path / "trex")
    with pytest.raises(SchemaError) as err:  # 3 choices + the gold = 4 options
        _docs(folder, relations="4", max_options=3)
    assert err.value.row == "test_2" and err.value.field == "Multiple Choices" and err.value.file == str(folder)
    assert "4 options, above max_options 3" in str(err.value)
    for knobs, knob in [
        ({"format": "space"}, "format"),
        ({"demos": "fact"}, "demos"),
        ({"reference_seed": 2**32}, "reference_seed"),
    ]:
        with pytest.raises(KnobError) as e:
            _docs(folder, **knobs)
        assert e.value.knob == knob
    with pytest.raises(KnobError, match="EIC-LKE has no reference code"):
        T.eiclke_trex_mc(parse_options(T.OPTIONS, {"trex_mc_path": str(folder), "reference": True}))
    for run in (T.iclke_bear, T.iclke_trex_mc):  # BEAR-big and the sample have no train split, no Multiple Choices
        with pytest.raises(KnobError, match="needs T-REx-MC"):
            run(parse_options(T.OPTIONS, {"source": "sample", "reference": True}))
    opts = parse_options(T.OPTIONS, {})
    assert (opts.reference, opts.reference_seed, opts.reference_rows) == (False, 10, 10)
    for bad in ({"reference": "maybe"}, {"reference_rows": -1}, {"reference_seed": -1}):
        with pytest.raises(KnobError, match=next(iter(bad))):
            parse_options(T.OPTIONS, bad)


def test_belief_eval_refuses_a_cut_before_loading_the_model(tmp_path):
    """One paragraph naming file, row and field, exit status 2, no traceback; the model path does not exist, so
    reaching the model load would fail differently."""
    from harness import run_cli

    folder = write_reference_fixture(tmp_path / "trex")
    md = {"trex_mc_path": str(folder), "reference": True, "max_options": 3}
    out = run_cli(
        [
            "--model",
            "hf",
            "--model_args",
            f"pretrained={tmp_path / 'no-model'}",
            "--tasks",
            "belief_iclke",
            "--metadata",
            json.dumps(md),
            "--output_path",
            str(tmp_path / "out"),
        ],
        timeout=600,
    )
    assert out.returncode == 2, out.stderr[-3000:]
    lines = [line for line in out.stderr.splitlines() if line.startswith("belief-eval:")]
    assert len(lines) == 1 and "stopped before loading the model" in lines[0], out.stderr[-3000:]
    assert f"file {folder}, row test_2, field 'Multiple Choices'" in lines[0] and "raise max_options" in lines[0]
    assert "Traceback" not in out.stderr


def test_reference_off_leaves_the_docs_as_they_were(tmp_path):
    folder = write_reference_fixture(tmp_path / "trex")
    md = {"trex_mc_path": str(folder)}
    plain = T.iclke_trex_mc(parse_options(T.OPTIONS, md))["test"].to_list()
    off = T.iclke_trex_mc(parse_options(T.OPTIONS, {**md, "reference": False, "reference_rows": 3}))["test"].to_list()
    assert off == plain and len(plain) == 13 and {d["format"] for d in plain} == {"space"}


# ---------------------------------------------------------------- end to end, on the bundled model


def _reference_scores(model, tok, base: str, options: list[str]) -> list[float]:
    """LKEs.py:43-93 with transformers in place of vLLM: the prompt log-probabilities of ``base + " : " + y``
    (one per token after the first, as vLLM's ``prompt_logprobs``), less the first len(encode(base)) - 1 of them
    (the tokens of the base prompt), summed."""
    import torch

    out = []
    for option in options:
        ids = tok.encode(base + P.REFERENCE_SEPARATOR + option)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        prompt_logprobs = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        out.append(float(prompt_logprobs[len(tok.encode(base)[1:]) :].sum()))
    return out


@pytest.mark.e2e
def test_reference_mode_end_to_end_equals_the_reference_s_scores(model_path, tmp_path):
    """Relation 4 through lm-eval (stock ``hf``): the logged requests are the reference's strings and each option's
    log-probability is what LKEs.py computes from the same model, token for token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness import evaluate

    folder = write_reference_fixture(tmp_path / "trex")
    md = {
        "source": "",
        "trex_mc_path": str(folder),
        "relations": "4",
        "reference": True,
        "n_examples": 4,
        "reference_rows": 3,
    }
    res = evaluate(["belief_iclke"], f"pretrained={model_path},device=cpu,dtype=float32", metadata=md)
    samples = sorted(res["samples"]["belief_iclke"], key=lambda s: s["doc_id"])
    assert [s["acc"]["subject"] for s in samples] == ["Norway", "Portugal", "Austria"]
    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype="float32").eval()
    head = "Italy : Rome , Egypt : Cairo , France : Paris , Spain : Madrid "
    for s in samples:
        rec, base = s["acc"], head + s["acc"]["subject"] + " : "
        assert [a[0] + a[1] for a in s["arguments"][:-1]] == [base + " : " + y for y in rec["options"]]
        assert s["arguments"][-1][0] + s["arguments"][-1][1] == base
        # the base prompt's tokens begin the tokens of every input (byte-level BPE): one split for both
        assert all(tok.encode(base + " : " + y)[: len(tok.encode(base))] == tok.encode(base) for y in rec["options"])
        want = _reference_scores(model, tok, base, rec["options"])
        assert rec["logprobs"] == pytest.approx(want, abs=2e-4)
        best, correct, mass = _reference_evaluate(want)
        assert (rec["prediction"], rec["correct"]) == (best, correct)
        assert rec["gold_prob"] == pytest.approx(mass, abs=1e-4)
    out = res["results"]["belief_iclke"]
    assert out["acc,none"] == pytest.approx(np.mean([s["acc"]["correct"] for s in samples]))
    assert out["gold_prob,none"] == pytest.approx(np.mean([s["acc"]["gold_prob"] for s in samples]))
