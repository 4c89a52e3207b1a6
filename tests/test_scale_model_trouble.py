"""Model-side trouble is never silent (issue 9): empty or punctuation-only answers, prompts
longer than the model's window, answers that tokenise to nothing.

What each case does today (docs/scale.md, "Model-side trouble"):

* empty / punctuation-only generations are *scored*, as wrong answers that agree with
  nothing; the record keeps the raw output, so they can be counted from the logged samples;
* a prompt longer than the window is cut from the left by lm-eval with a WARNING naming
  both lengths (log-likelihoods and generations alike);
* an empty continuation makes lm-eval's ``hf`` stop (its assertion), and MONITOR refuses an
  answer unit with no token; loaders refuse empty or blank labels before that
  (tests/test_bad_input.py).
"""

from __future__ import annotations

import json
import logging

import pytest

from belief_tasks.facts.matching import contains_answer, outputs_agree, word_count
from belief_tasks.metrics.belief import consistency
from belief_tasks.tasks.belief_icl import extract_answer, make_record

pytestmark = pytest.mark.usefixtures("one_torch_thread")
EMPTYISH = ["", "   ", "\n", ".", "...", "?!", "A: .", '""', "—"]


def belief_doc(**over) -> dict:
    """A pair document with one prompt (one template, one subject expression), sampled."""
    doc = {
        "fact_id": "P36/Q142",
        "relation": "P36",
        "fact_key": json.dumps(
            {
                "key": "P36|label",
                "relation": "P36",
                "subject_id": None,
                "subjects": ["label"],
                "objects": ["Paris"],
                "object_ids": [],
            }
        ),
        "templates": json.dumps(["P36_t0"]),
        "subjects": json.dumps(["label"]),
        "style": "mp",
        "context": "zeroshot",
        "objects": json.dumps(["Paris"]),
        "sampled": 0,
        "seed": 1234,
        "draws": 10,
        "bins": 10,
    }
    return {**doc, **over}


@pytest.mark.parametrize("output", EMPTYISH)
def test_empty_or_punctuation_answers_are_scored_wrong_and_kept(output):
    rec = make_record(belief_doc(), [output], [])  # the raw generation stays in the sample's resps
    assert normalize_free(rec["answers"][0])
    assert rec["correct"] == [False] and word_count(rec["answers"][0]) != 1


def normalize_free(answer: str) -> bool:
    """True when the extracted answer holds no word at all."""
    from belief_tasks.facts.matching import normalize

    return normalize(answer) == ()


@pytest.mark.parametrize("output", EMPTYISH)
def test_empty_answers_agree_with_nothing(output):
    answer = extract_answer(output)  # what every BELIEF metric compares
    assert not contains_answer(answer, ["Paris"])
    assert not outputs_agree(answer, answer)  # two empty answers are not "consistent"
    assert not outputs_agree(answer, "Paris")


def test_empty_answers_lower_consistency_instead_of_vanishing():
    pairs = ["a", "a", "a", "b", "b"]
    assert consistency(pairs, ["Paris", "Paris", "", "Rome", "Rome"]) == pytest.approx((1 / 3 + 1) / 2)
    assert consistency(pairs, ["", "", "", "...", ""]) == 0.0


def test_sampled_confidence_counts_empty_samples_as_disagreeing():
    rec = make_record(belief_doc(), ["Paris"], ["Paris", "", "...", "Paris"])
    assert rec["confidence"] == pytest.approx(0.5) and rec["n_samples"] == 4


def test_monitor_empty_subword_unit_is_an_error():
    from belief_tasks.prompts.monitor import Pieces, unit_token_counts

    p = Pieces([1, 2], [5, 6], {0: 0, 3: 1, 6: 1, 8: 2})
    with pytest.raises(ValueError, match="empty subword unit"):
        unit_token_counts(p, [0, 3, 6, 8])


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def short_window_lm(model_path):
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(model_path), device="cpu", dtype="float32", batch_size=2, max_length=16)


@pytest.mark.e2e
def test_prompts_longer_than_the_window_are_cut_with_a_warning(short_window_lm):
    from lm_eval.api.instance import Instance

    handler = Collect()
    logging.getLogger("lm_eval").addHandler(handler)
    long = "The capital of France is Paris. " * 8 + "The capital of Italy is"
    try:
        ll = short_window_lm.loglikelihood([Instance("loglikelihood", {}, (long, " Rome"), 0)])
        gen = short_window_lm.generate_until(
            [Instance("generate_until", {}, (long, {"until": ["\n"], "max_gen_toks": 4, "do_sample": False}), 0)]
        )
    finally:
        logging.getLogger("lm_eval").removeHandler(handler)
    assert ll[0][0] < 0 and isinstance(gen[0], str)  # it still answers, from the last 16 / 12 tokens
    assert any("exceeds model's maximum length" in m for m in handler.messages), handler.messages
    assert any("Left truncation applied" in m for m in handler.messages), handler.messages


@pytest.mark.e2e
def test_an_empty_continuation_stops_the_hf_backend(short_window_lm):
    from lm_eval.api.instance import Instance

    with pytest.raises(AssertionError):
        short_window_lm.loglikelihood([Instance("loglikelihood", {}, ("The capital of France is", ""), 0)])


def test_empty_answers_are_counted_in_their_own_metric(caplog):
    from belief_tasks.metrics.belief import empty_answer_rate, empty_answer_stderr
    from belief_tasks.scoring.belief_icl import agg_empty_answer_rate

    recs = [
        make_record(belief_doc(fact_id=f"p{i}"), [out], []) for i, out in enumerate(["", " Paris.", " ?!", " Lyon"])
    ]
    answers = [r["answers"][0] for r in recs]
    assert empty_answer_rate(answers) == 0.5  # by hand: "" and "?!" of four
    assert empty_answer_stderr(answers) == pytest.approx((0.25 / 3) ** 0.5)  # sample SD / sqrt(n)
    with caplog.at_level("WARNING"):
        assert agg_empty_answer_rate(recs) == 0.5
    assert "2 of 4 greedy answers are empty or punctuation only" in caplog.text
    assert agg_empty_answer_rate(recs[1:2]) == 0.0
