"""``requests.encode_requests``: the tokens of every log-likelihood request exactly as lm-eval makes them
(``encode_request``: context + continuation tokenised whole), with a shared context tokenised once and only its
last words again with each option (``SharedContext``)."""

from __future__ import annotations

import pytest

from belief_tasks.data import load_facts
from belief_tasks.options import parse_options
from belief_tasks.requests import SHARED_TAIL_CHARS, cut_point, encode_request, encode_requests
from belief_tasks.tasks import iclke as T


class Counted:
    """``requests.Tokenizes`` over a transformers tokenizer, as lm-eval's ``HFLM.tok_encode`` calls it (special
    tokens on by default for a model that adds them, ``bos`` or ``eos``), counting the characters it tokenises.

    ``bos``: a BOS before every string tokenised with special tokens; ``eos``: an EOS after it, as tokenizers
    with a post-processor that ends a sequence do; ``dummy_prefix``: a space before every string, as
    SentencePiece's dummy prefix does."""

    def __init__(self, tokenizer, bos: bool = False, dummy_prefix: bool = False, eos: bool = False):
        self.tokenizer, self.bos, self.dummy_prefix, self.eos = tokenizer, bos, dummy_prefix, eos
        self.prefix_token_id = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self.chars = 0

    def tok_encode(self, string: str, add_special_tokens: bool | None = None) -> list[int]:
        special = (self.bos or self.eos) if add_special_tokens is None else add_special_tokens
        self.chars += len(string)
        ids = self.tokenizer.encode((" " if self.dummy_prefix else "") + string, add_special_tokens=False)
        return ([self.prefix_token_id] if special and self.bos else []) + ids + ([99] if special and self.eos else [])


@pytest.fixture(scope="module")
def tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


def one_by_one(tok, pairs) -> list:
    return [encode_request(tok, c, x) for c, x in pairs]


@pytest.fixture(scope="module")
def bear_big_requests(shared_data) -> list[tuple[str, str]]:
    """IC-LKE's requests on real BEAR-big facts (places, people, languages, occupations, numbers in names), the
    first 8 facts of six relations, in the paper's format and EIC-LKE's: 50 examples and 100 options (or every
    object of the relation) per fact, grouped by context as lm-eval sends them."""
    pairs = []
    for fmt in ("space", "space_comma"):
        md = {"bear_big_path": str(shared_data / "bear" / "BEAR-big"), "format": fmt}
        md["relations"] = "P19,P27,P36,P103,P106,P1412"
        docs = T.iclke_docs(load_facts("bear_big", md), parse_options(T.OPTIONS, md))
        firsts: dict[str, int] = {}
        for d in docs:
            if firsts.setdefault(d["relation"], 0) < 8:
                firsts[d["relation"]] += 1
                pairs += [(d["context"], " " + o) for o in d["options"]]
    return pairs


@pytest.mark.parametrize("bos", [False, True], ids=["no-bos", "bos"])
def test_iclke_on_bear_big_equals_lm_eval_s_tokens_and_tokenises_a_tenth(tokenizer, bear_big_requests, bos):
    slow, fast = Counted(tokenizer, bos=bos), Counted(tokenizer, bos=bos)
    assert len(bear_big_requests) > 7000
    assert list(encode_requests(fast, bear_big_requests)) == one_by_one(slow, bear_big_requests)
    # each context is tokenised about four times (its tokens, two requests whole, the head) instead of 100
    assert fast.chars < 0.1 * slow.chars


def test_continuations_that_touch_the_context_s_end(tokenizer):
    """Continuations whose first characters join the context's last token, or change how its trailing
    whitespace is split (lm-eval moves that whitespace into the continuation)."""
    context = " ".join(f"Person{i} City{i * 7 % 11}" for i in range(30)) + " Person99"
    continuations = ["", " ", "  Paris", "\n\nRome", "'s home", ", and", "99", " 1999", " Ünïcödé ", "-", "."]
    continuations += [" " + "a very long name that runs past the cut point itself " * 2, "\t" + "x" * 60]
    for trailing in ("", " ", "\n", " \n "):
        pairs = [(context + trailing, c) for c in [" Paris", " Rome", *continuations]]
        tok = Counted(tokenizer)
        assert list(encode_requests(tok, pairs)) == one_by_one(Counted(tokenizer), pairs), repr(trailing)


@pytest.mark.parametrize("quirk", ["dummy_prefix", "eos"])
def test_tokenizers_that_mark_a_string_s_ends_are_tokenised_whole(tokenizer, quirk):
    """Where the head and the tail do not make the context's own tokens, the cut is never used."""
    context = " ".join(f"Person{i} City{i * 7 % 11}" for i in range(30)) + " Person99"
    pairs = [(context, f" City{i}") for i in range(20)]
    fast, slow = Counted(tokenizer, **{quirk: True}), Counted(tokenizer, **{quirk: True})
    assert list(encode_requests(fast, pairs)) == one_by_one(slow, pairs)
    assert fast.chars >= sum(len(c) + len(x) for c, x in pairs)  # every request tokenised whole


def test_cut_point():
    assert cut_point("short text") == 0
    text = "a" * 10 + "   " + "b" * SHARED_TAIL_CHARS
    assert cut_point(text) == 10  # the first of a run of spaces, after a word
    assert cut_point("x" * 100) == 0  # no whitespace
    words = "one two three four five six seven eight nine ten eleven"
    cut = cut_point(words)
    assert words[cut] == " " and len(words) - cut >= SHARED_TAIL_CHARS and len(words) - words.index(" ", cut + 1) < 32


def test_the_estimate_s_encoder_encodes_every_string_ahead_in_batches(tokenizer, monkeypatch):
    """``planning.cost.Encoder``: ``prepare`` batch-encodes what ``pair`` will ask for (``strings_to_encode``), so
    no string is encoded one by one, and the pairs are lm-eval's."""
    from belief_tasks.planning.cost import Encoder

    context = " ".join(f"Person{i} City{i * 7 % 11}" for i in range(30))
    pairs = [(context + f" Person{k} ", f"City{i}") for k in range(3) for i in range(k * 2 + 1)]  # runs of 1, 3, 5
    pairs += [("", "A statement scored whole"), ("Short context ", "x"), ("Short context ", "y")]
    encoder = Encoder(tokenizer, 8192)
    own = encoder.prepare(pairs)
    singles = []
    batch = Encoder.encode_many
    monkeypatch.setattr(Encoder, "encode_many", lambda self, texts, special=None: singles.append(list(texts)))
    got = [encoder.pair(c, x) for c, x in pairs]
    monkeypatch.setattr(Encoder, "encode_many", batch)
    assert singles == [] and got == one_by_one(Counted(tokenizer), pairs)
    encoder.forget(own)
    assert {text for text, _ in encoder._memo} == {context + f" Person{k}" for k in range(3)} | {"Short context"}
