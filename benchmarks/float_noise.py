"""How much float32 log-probabilities move with the shape of a forward, on stock transformers alone.

Scores the same BEAR statements with the bundled model (float32, CPU) alone, inside batches of
copies, and right-padded to longer rows, and prints the largest differences of the logits and
of the statements' log-likelihoods against the statement forwarded alone. Nothing here is ours:
it is the floor under any comparison of two backends (``hf-shared`` against ``hf``), since a
different batch shape alone changes the last bits of every matmul. Run it twice to see where
the noise comes from:

    python -m benchmarks float_noise
    MKL_CBWR=AVX2,STRICT python -m benchmarks float_noise   # MKL's reproducible mode

Under ``MKL_CBWR=AVX2,STRICT`` the batch-shape differences vanish (the matmuls then round the
same whatever the number of rows); the padding differences stay (attention over a longer row).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F

from benchmarks import workloads


def statement_ids(tokenizer, n: int) -> list[list[int]]:
    fs = workloads.sample_facts()
    out = []
    for fact in fs.facts[:n]:
        text = (
            fs.relations[fact.relation].templates_of("statement", False)[0].fill(fact.subject.label, fact.object.label)
        )
        out.append([tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def loglikelihood(logits: torch.Tensor, ids: list[int]) -> float:
    logp = F.log_softmax(logits[: len(ids) - 1].float(), dim=-1)
    return float(logp.gather(-1, torch.tensor(ids[1:])[:, None]).sum())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--statements", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = workloads.model_path()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    worst = {"batch of 16 copies": [0.0, 0.0], "padded to 64 tokens": [0.0, 0.0]}
    with torch.no_grad():
        for ids in statement_ids(tokenizer, args.statements):
            alone = model(torch.tensor([ids])).logits[0]
            ll = loglikelihood(alone, ids)
            batch = model(torch.tensor([ids] * 16)).logits[7]
            padded = model(torch.tensor([ids + [0] * (64 - len(ids))])).logits[0, : len(ids)]
            for name, other in (("batch of 16 copies", batch), ("padded to 64 tokens", padded)):
                w = worst[name]
                w[0] = max(w[0], float((other - alone).abs().max()))
                w[1] = max(w[1], abs(loglikelihood(other, ids) - ll))
    print(
        f"MKL_CBWR={os.environ.get('MKL_CBWR', '(unset)')}, torch threads {args.threads}, {args.statements} statements"
    )
    print("| against the statement alone | max |logit difference| | max |log-likelihood difference| (nats) |")
    print("| --- | --- | --- |")
    for name, (logit, ll) in worst.items():
        print(f"| {name} | {logit:.2e} | {ll:.2e} |")
