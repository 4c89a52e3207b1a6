"""Throughput of hf-mlm's PLL against lm-pub-quiz 0.3.3 on the same random BERT and statements.

    python -m benchmarks mlm [--size tiny|small|base] [--facts 5] [--batch-size 64] [--pll within_word_l2r]

Builds a random BERT of the chosen size with a WordPiece vocabulary of the bundled
sample's words (no download), fills BEAR-style statements ("The capital of [X] is
[Y].", every answer-space option for each fact) and scores them both ways. Prints
the maximum per-statement difference, agreement of the argmax option, masked
copies run, and statements per second. No pass/fail: speed goals live here, not
in timed tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks import measure, workloads
from benchmarks.workloads import ROOT

sys.path.append(str(ROOT / "tests"))  # the tests' random BERT builder (test_mlm_tiny.build_tiny_mlm)

SIZES = {
    "tiny": {},
    "small": dict(
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=1024,
        max_position_embeddings=128,
        initializer_range=0.02,
    ),
    "base": dict(
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        initializer_range=0.02,
    ),
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="small")
    ap.add_argument("--facts", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--pll", choices=["within_word_l2r", "original"], default="within_word_l2r")
    ap.add_argument("--relation", default="P36")
    args = ap.parse_args(argv)

    from lm_eval.api.instance import Instance
    from lm_pub_quiz import Evaluator
    from test_mlm_tiny import build_tiny_mlm

    from belief_tasks.backends.mlm import HFMaskedLM

    fs = workloads.sample_facts("myriadlama")
    rel = fs.relations[args.relation]
    template = rel.templates_of("statement")[0].text
    options = [e.label for e in rel.answer_space]
    facts = fs.facts_of(rel.id)[: args.facts]

    with tempfile.TemporaryDirectory() as tmp:
        folder = build_tiny_mlm(Path(tmp), **SIZES[args.size])
        lm = HFMaskedLM(
            pretrained=str(folder), dtype="float32", device="cpu", batch_size=args.batch_size, pll_metric=args.pll
        )
        ref = Evaluator.from_model(
            lm.model, model_type="MLM", tokenizer=lm.tokenizer, device="cpu", pll_metric=args.pll
        )

        statements = [template.replace("[X]", f.subject.label).replace("[Y]", o) for f in facts for o in options]
        statements = [s[0].upper() + s[1:] for s in statements]
        reqs = [Instance("loglikelihood", {}, ("", s), i) for i, s in enumerate(statements)]
        n_copies = sum(len(lm._pll_copies(s, 0, len(s))) for s in statements)

        out, t_ours, _ = measure.clocked(lm.loglikelihood, reqs, disable_tqdm=True)
        ours = measure.loglikelihoods(out)

        def reference() -> list[float]:
            theirs = []
            for f in facts:
                filled = template.replace("[X]", f.subject.label)
                filled = filled[0].upper() + filled[1:]
                theirs += ref.score_answers(
                    template=filled, answers=options, reduction="sum", batch_size=args.batch_size
                )
            return theirs

        theirs, t_ref, _ = measure.clocked(reference)

    n = len(options)
    groups = [n] * len(facts)
    agree = sum(a == b for a, b in zip(measure.predictions(ours, groups), measure.predictions(theirs, groups)))
    diff = max(measure.gaps(ours, theirs))
    print(f"model: random BERT ({args.size}), pll={args.pll}, batch_size={args.batch_size}")
    print(f"statements: {len(statements)} ({len(facts)} facts x {n} options), masked copies: {n_copies}")
    print(f"max |ours - lm-pub-quiz| per statement: {diff:.2e}; same top option: {agree}/{len(facts)}")
    print(f"hf-mlm:      {t_ours:7.2f}s  {len(statements) / t_ours:8.1f} statements/s")
    print(f"lm-pub-quiz: {t_ref:7.2f}s  {len(statements) / t_ref:8.1f} statements/s  (ratio {t_ref / t_ours:.2f}x)")
