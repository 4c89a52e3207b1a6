"""A tiny BERT built on the spot (random weights, hand-made WordPiece vocabulary).

``build_tiny_mlm(folder)`` writes a ``save_pretrained`` folder that ``hf-mlm`` loads
like any checkpoint. Its vocabulary holds the words of the bundled sample's
statement templates and subjects, some of its objects (so the single-token filter
keeps some facts and drops others) and a word split in two pieces ("mont ##real")
for within-word PLL. ``favour="paris"`` raises the output bias of one token so the
model predicts it everywhere, which makes accuracies predictable.

The other ``test_mlm_*`` files import the builder from here; the tests below check
the fixture is what they assume.
"""

from __future__ import annotations

import inspect
import re
import unicodedata
from pathlib import Path

import pytest

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
BASE_WORDS = [
    "the",
    "capital",
    "city",
    "is",
    "a",
    "of",
    "in",
    "was",
    "born",
    "mont",
    "##real",
    "paris",
    "berlin",
    "rome",
    "france",
    "germany",
    "italy",
    "and",
    "to",
    "what",
    "n",
    "##s",
    "##a",
]
PUNCT = list(".,?!/-'()")
SPLIT_WORD = "montreal"  # never a whole token: mont ##real


def norm_words(text: str) -> list[str]:
    """Lower-cased, accent-free words the way an uncased BERT pre-tokeniser splits them."""
    text = "".join(c for c in unicodedata.normalize("NFD", text.lower()) if not unicodedata.combining(c))
    return re.findall(r"[^\W_]+", text)


def sample_vocab_words() -> list[str]:
    """Template and subject words of the bundled sample, plus every other object word."""
    from belief_tasks.data import load_facts

    fs = load_facts("myriadlama", {"source": "sample"})
    words: list[str] = []
    for rel in fs.relations.values():
        for t in rel.templates:
            words += norm_words(t.text.replace("[X]", " ").replace("[Y]", " "))
    objects = sorted({o.label for f in fs for o in f.objects})
    for f in fs:
        words += norm_words(f.subject.label)
    for i, label in enumerate(objects):  # half of the objects: some facts get dropped
        if i % 2 == 0:
            words += norm_words(label)
    return words


def build_tiny_mlm(folder: Path, *, favour: str | None = None, seed: int = 0, extra_words=(), **config) -> Path:
    """Save a random BERT and its tokenizer to ``folder``; ``config`` overrides the tiny dimensions."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    words = [w for w in dict.fromkeys([*BASE_WORDS, *extra_words, *sample_vocab_words()]) if w != SPLIT_WORD]
    vocab = list(dict.fromkeys([*SPECIALS, *PUNCT, *words]))
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    # transformers 5 takes the vocabulary itself (``vocab=``); 4.x takes ``vocab_file=``.
    if "vocab_file" in inspect.signature(BertTokenizerFast.__init__).parameters:
        tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    else:
        tok = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    tok.save_pretrained(folder)
    torch.manual_seed(seed)
    dims = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        initializer_range=0.5,
    )  # large weights: outputs depend on the input
    config = BertConfig(vocab_size=len(vocab), pad_token_id=0, **{**dims, **config})
    model = BertForMaskedLM(config).eval()
    if favour is not None:
        with torch.no_grad():
            model.cls.predictions.bias[vocab.index(favour)] += 40.0
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_mlm(tmp_path_factory.mktemp("tiny_bert"))


def test_tiny_tokenizer_splits_as_the_tests_assume(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    enc = tok("Montreal is a city.")
    assert tok.convert_ids_to_tokens(enc["input_ids"]) == ["[CLS]", "mont", "##real", "is", "a", "city", ".", "[SEP]"]
    assert enc.word_ids() == [None, 0, 0, 1, 2, 3, 4, None]
    assert tok.mask_token == "[MASK]" and tok.is_fast


def test_tiny_model_loads_and_favours_a_token(tmp_path):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    folder = build_tiny_mlm(tmp_path, favour="paris")
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModelForMaskedLM.from_pretrained(folder)
    enc = tok("The capital of France is [MASK].", return_tensors="pt")
    pos = enc["input_ids"][0].tolist().index(tok.mask_token_id)
    with torch.no_grad():
        probs = model(**enc).logits[0, pos].softmax(-1)
    assert tok.convert_ids_to_tokens(int(probs.argmax())) == "paris" and float(probs.max()) > 0.9
