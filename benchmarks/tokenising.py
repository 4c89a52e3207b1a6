"""IC-LKE's requests tokenised as lm-eval does, one by one, against ``encode_requests`` and the estimate's ``Encoder``.

lm-eval tokenises each log-likelihood request's context + continuation whole (``requests.encode_request``): for
IC-LKE, a fact's 50-example context once per option. ``requests.encode_requests`` (``hf-shared``, ``vllm-shared``,
the truncation check) tokenises a shared context once and then its last words with each option
(``requests.SharedContext``); the estimate's ``planning.cost.Encoder`` does the same in batches. The three arms run
in rotating order on the same requests with the bundled model's tokenizer, and must give the same tokens.

    python -m benchmarks tokenising                                    # the bundled sample's facts
    python -m benchmarks tokenising --data_dir DATA_DIR --relations P19,P27,P106   # real BEAR-big facts
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks import measure, workloads


class HFTokens:
    """``requests.Tokenizes`` as lm-eval's ``HFLM.tok_encode`` calls a tokenizer without a BOS of its own."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        bos = tokenizer.bos_token_id
        self.prefix_token_id = bos if bos is not None else tokenizer.eos_token_id

    def tok_encode(self, string: str, add_special_tokens: bool | None = None) -> list[int]:
        return self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens))


def requests_of(args) -> list[tuple[str, str]]:
    """(context, continuation) of every option of every fact, grouped by fact as lm-eval sends them."""
    if args.data_dir is None:
        facts = workloads.sample_facts("bear")
        return [pair for fact in workloads.iclke_requests(facts, args.facts) for pair in fact]
    from belief_tasks.data import load_facts
    from belief_tasks.options import parse_options
    from belief_tasks.tasks import iclke

    md = {"bear_big_path": workloads.real_data_env(args.data_dir)["BELIEF_BEAR_BIG_PATH"], "relations": args.relations}
    docs = iclke.iclke_docs(load_facts("bear_big", md), parse_options(iclke.OPTIONS, md))
    return [(d["context"], " " + option) for d in docs for option in d["options"]]


def arms(tokenizer, max_length: int):
    from belief_tasks.planning.cost import Encoder
    from belief_tasks.requests import encode_request, encode_requests

    tok = HFTokens(tokenizer)

    def estimate_encoder(pairs):
        encoder = Encoder(tokenizer, max_length)
        encoder.prepare(pairs)
        return [encoder.pair(c, x) for c, x in pairs]

    return {
        "lm-eval, one by one (encode_request)": lambda pairs: [encode_request(tok, c, x) for c, x in pairs],
        "encode_requests (shared context)": lambda pairs: list(encode_requests(tok, pairs)),
        "the estimate's Encoder (batches)": estimate_encoder,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, default=40, help="facts of the bundled sample (without --data_dir)")
    ap.add_argument("--data_dir", default=None, help="DATA_DIR holding bear/BEAR-big")
    ap.add_argument("--relations", default="P19,P27,P106", help="BEAR-big relations (with --data_dir)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(workloads.model_path())
    pairs = requests_of(args)
    contexts = len({c for c, _ in pairs})
    print(f"{len(pairs):,} requests, {contexts:,} contexts; {measure.machine()}")
    runs = arms(tokenizer, 8192)
    walls: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, list] = {}
    for _, name in measure.rotations(list(runs), args.rounds):
        outputs[name], wall, _ = measure.clocked(runs[name], pairs)
        walls[name].append(wall)
    reference = outputs[next(iter(runs))]
    same = all(out == reference for out in outputs.values())
    tokens = sum(len(c) + len(x) for c, x in reference)
    base = statistics.median(walls[next(iter(runs))])
    print(f"tokens: {tokens:,}; every arm gives lm-eval's tokens: {same}")
    print("| arm | median wall | / lm-eval's |\n| --- | ---: | ---: |")
    for name, times in walls.items():
        print(f"| {name} | {statistics.median(times):.2f} s | {statistics.median(times) / base:.3f} |")
    return 0 if same else 1
