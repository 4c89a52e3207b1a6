"""Our request types: their names, argument and response shapes, and what they share.

lm-eval dispatches a request to the model method of the same name, so a task and a backend
agree only through these names and shapes. Besides lm-eval's own three (``loglikelihood``,
``loglikelihood_rolling``, ``generate_until``) our tasks send:

=========================== ============================== ==============================================
name                        arguments                      response
=========================== ============================== ==============================================
``per_token_loglikelihood`` ``(context, continuation)``    ``[log p(token)]``, one float per continuation
                                                           token, tokenised as ``loglikelihood`` does
                                                           (``hf-shared``; MONITOR's ``per_token`` route)
``mask_topk``               ``(prompt, k[, targets])``     ``{"tokens", "token_ids", "logprobs"}`` of the
                                                           top k at the single ``MASK`` of ``prompt``,
                                                           ``"targets": {target: {"token", "token_id",
                                                           "logprob", "rank"} | None}`` (None: not one
                                                           token there), ``"vocab_size"`` (``hf-mlm``)
``loglikelihood_span``      ``(text, start, end)``         ``(PLL of the tokens covering text[start:end],
                                                           is_greedy)`` (``hf-mlm``)
=========================== ============================== ==============================================

Pure: no lm-eval, no torch (``object_token_id`` takes any transformers tokenizer). ``effective_stops`` says
which stop strings of a ``generate_until`` request can ever matter (``hf-shared`` and stock ``hf`` group by them);
``is_seeded_sample`` which ``generate_until`` requests carry their own sampling seed (the cache hook and the
batched sampler on stock ``hf`` read them).

``encode_request`` is the one place a log-likelihood request (``loglikelihood``, ``per_token_loglikelihood``) is
tokenised as lm-eval's ``TemplateLM.loglikelihood`` does it for a causal model; ``encode_requests`` does it for
many, each context tokenised once for the requests that follow it. Both need only what lm-eval's models have:
``tok_encode`` and ``prefix_token_id`` (``Tokenizes``): ``hf-shared``, ``vllm-shared``, the truncation check and
MONITOR's subword pieces pass the model or its tokenizer, ``belief-eval --estimate`` an encoder without a model.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Protocol

PER_TOKEN_LOGLIKELIHOOD = "per_token_loglikelihood"
MASK_TOPK = "mask_topk"
LOGLIKELIHOOD_SPAN = "loglikelihood_span"

#: request types that are methods of our backends, not of lm-eval's ``LM`` (the cache hook reads them)
CUSTOM_REQUEST_TYPES = frozenset({PER_TOKEN_LOGLIKELIHOOD, MASK_TOPK, LOGLIKELIHOOD_SPAN})

#: how MONITOR asks for a gold object's per-subword probabilities: ``loglikelihood`` on growing prefixes
#: (any backend; exact on ``hf``), or one ``per_token_loglikelihood`` per anchor (``hf-shared``)
SUBWORD_ROUTES = ("prefix", "per_token")

#: the marker every masked prompt carries exactly once; ``hf-mlm`` swaps in its tokenizer's own
#: mask token, so one prompt text serves BERT (``[MASK]``) and RoBERTa (``<mask>``)
MASK = "[MASK]"


class Tokenizes(Protocol):
    """What tokenising a request needs, as lm-eval's ``TemplateLM`` has it: ``tok_encode`` (``None``: the model's own
    setting for special tokens) and the token an empty context becomes (BOS, else EOS)."""

    @property
    def prefix_token_id(self) -> int: ...

    def tok_encode(self, string: str, add_special_tokens: bool | None = None) -> list[int]: ...


def encode_request(
    tok: Tokenizes, context: str, continuation: str, context_tokens: list[int] | None = None
) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens) of a log-likelihood request, as lm-eval's ``TemplateLM.loglikelihood``
    (0.4.12-0.4.13) makes them for a causal model: an empty context is the prefix token, unless the continuation
    starts with it; otherwise ``_encode_pair``: the context's trailing whitespace moves to the continuation, the
    whole string is tokenised once and the continuation is what follows the context's own tokens.

    ``context_tokens``: ``tok.tok_encode`` of the context without its trailing whitespace, when the caller has it
    (``encode_requests``)."""
    if context == "":
        continuation_enc = tok.tok_encode(continuation, add_special_tokens=False)
        if not continuation_enc or tok.prefix_token_id != continuation_enc[0]:  # (lm-eval: an IndexError)
            return [tok.prefix_token_id], continuation_enc
        return continuation_enc[:1], continuation_enc[1:]
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tok.tok_encode(context + continuation)
    context_enc = tok.tok_encode(context) if context_tokens is None else context_tokens
    return context_enc, whole[len(context_enc) :]


def encode_requests(tok: Tokenizes, pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[list[int], list[int]]]:
    """``encode_request`` of each (context, continuation), in order (``RequestEncoder``)."""
    encode = RequestEncoder(tok)
    for context, continuation in pairs:
        yield encode(context, continuation)


class RequestEncoder:
    """``encode_request`` of one request after another. Consecutive requests with one context (IC-LKE's options)
    share it (``SharedContext``): one list of its tokens, and from the third request on only its last words are
    tokenised again with each continuation. Only the last context is remembered, so memory does not grow with the
    requests; callers that want every context tokenised once hand them grouped by context."""

    def __init__(self, tok: Tokenizes):
        self.tok = tok
        self.shared: SharedContext | None = None

    def __call__(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        stripped = context.rstrip()
        if not stripped:
            return encode_request(self.tok, context, continuation)
        if self.shared is None or self.shared.text != stripped:
            self.shared = SharedContext(self.tok, stripped)
        return self.shared.encode(context[len(stripped) :] + continuation)


def strings_to_encode(pairs: Iterable[tuple[str, str]]) -> tuple[list[str], list[str], list[str]]:
    """What ``encode_requests`` of these pairs asks ``tok_encode`` for, for a tokenizer that encodes in batches
    ahead (``planning.cost.Encoder``): (contexts and requests' strings with the default special tokens, requests'
    strings without). It assumes each shared context's cut holds; where it does not, the rest of its requests are
    asked for one by one."""
    contexts: list[str] = []
    wholes: list[str] = []
    bare: list[str] = []
    runs: list[tuple[str, list[str]]] = []  # (context without its trailing whitespace, continuations)
    for context, continuation in pairs:
        stripped = context.rstrip()
        if not stripped:
            bare.append(continuation)
        elif runs and runs[-1][0] == stripped:
            runs[-1][1].append(context[len(stripped) :] + continuation)
        else:
            runs.append((stripped, [context[len(stripped) :] + continuation]))
    for text, continuations in runs:
        contexts.append(text)
        with_special, without = SharedContext.strings(text, continuations)
        wholes += with_special
        bare += without
    return contexts, wholes, bare


#: characters of a shared context tokenised again with each continuation: a tokenizer's choices near the cut
#: depend on a few characters either side (pre-tokenizer look-ahead), never on 32 away
SHARED_TAIL_CHARS = 32


class SharedContext:
    """A context (without its trailing whitespace) and the requests that follow it, tokenised as lm-eval does.

    lm-eval tokenises context + continuation whole for each request (``encode_request``): 100 times a 50-example
    context for one IC-LKE fact. Here the context is cut at a space ``SHARED_TAIL_CHARS`` or more before its end;
    a request's whole tokens are the head's (``text[:cut]``, tokenised once) followed by those of the tail and
    the continuation. The cut is used only once it is proven on this context: the head's and the tail's tokens
    make the context's own, and the first request's whole tokens (the first two requests are tokenised whole).
    Otherwise (no space far enough back, a tokenizer that marks a string's start, e.g. SentencePiece's dummy
    prefix, or one that adds tokens at the end) every request is tokenised whole. What is assumed: a continuation
    does not change how a tokenizer splits text 32 characters before it (true of every pre-tokenizer that splits
    at whitespace: byte-level BPE, WordPiece, SentencePiece)."""

    #: requests tokenised whole before the cut is tried (the first one's tokens are the cut's proof)
    WHOLE_FIRST = 2

    def __init__(self, tok: Tokenizes, text: str):
        self.tok, self.text = tok, text
        self.tokens = tok.tok_encode(text)
        self.cut = 0
        self.head: list[int] | None = None
        self.first: tuple[str, list[int]] | None = None  # (continuation, whole tokens) of the first request
        self.requests = 0

    def encode(self, continuation: str) -> tuple[list[int], list[int]]:
        """(context tokens, continuation tokens); ``continuation`` begins with the context's trailing whitespace."""
        self.requests += 1
        if self.requests == self.WHOLE_FIRST + 1:  # a context shared by two requests is not worth the try
            self._try_cut()
        if self.head is not None:
            whole = self.head + self._tail(continuation)
        else:
            whole = self.tok.tok_encode(self.text + continuation)
            if self.first is None:
                self.first = (continuation, whole)
        return self.tokens, whole[len(self.tokens) :]

    @classmethod
    def strings(cls, text: str, continuations: list[str]) -> tuple[list[str], list[str]]:
        """What ``encode`` of these continuations (after ``text``'s own tokens) asks ``tok_encode`` for, with the
        default special tokens and without, where the cut holds: the first requests whole and the head; the tail
        alone and with the first continuation (the proof), then with each later one."""
        cut = cut_point(text) if len(continuations) > cls.WHOLE_FIRST else 0
        if not cut:
            return [text + c for c in continuations], []
        first, later = continuations[: cls.WHOLE_FIRST], continuations[cls.WHOLE_FIRST :]
        return [text + c for c in first] + [text[:cut]], [text[cut:], *(text[cut:] + c for c in [first[0], *later])]

    def _tail(self, continuation: str) -> list[int]:
        return self.tok.tok_encode(self.text[self.cut :] + continuation, add_special_tokens=False)

    def _try_cut(self) -> None:
        assert self.first is not None
        cut = cut_point(self.text)
        if not cut:
            return
        self.cut, head = cut, self.tok.tok_encode(self.text[:cut])
        continuation, whole = self.first
        if head + self._tail("") == self.tokens and head + self._tail(continuation) == whole:
            self.head = head


def cut_point(text: str) -> int:
    """Where ``SharedContext`` cuts ``text``: at its last whitespace that follows a word and lies
    ``SHARED_TAIL_CHARS`` or more before its end (0: nowhere)."""
    for i in range(len(text) - SHARED_TAIL_CHARS, 0, -1):
        if text[i].isspace() and not text[i - 1].isspace():
            return i
    return 0


def object_token_id(tokenizer, prompt: str, word: str) -> int | None:
    """The single vocabulary id ``word`` takes in place of the mask of ``prompt``, else None.

    ``prompt`` holds ``MASK`` (or the tokenizer's own mask token). The word is written into the
    prompt and both versions are tokenised: the word is a single token exactly when the two token
    sequences differ only at the mask. This respects context-dependent tokenisation (RoBERTa's
    leading-space tokens, casing). Tasks use it to keep single-token objects; ``hf-mlm`` to find
    a target's rank.
    """
    if not word or not word.strip():
        return None
    mask_token = tokenizer.mask_token
    slot = MASK if MASK in prompt else mask_token
    masked = tokenizer(prompt.replace(slot, mask_token), add_special_tokens=False)["input_ids"]
    filled = tokenizer(prompt.replace(slot, word), add_special_tokens=False)["input_ids"]
    if len(masked) != len(filled):
        return None
    diff = [i for i, (a, b) in enumerate(zip(masked, filled)) if a != b]
    if len(diff) != 1 or masked[diff[0]] != tokenizer.mask_token_id:
        return None
    token = filled[diff[0]]
    if token == tokenizer.unk_token_id or token in tokenizer.all_special_ids:
        return None
    return token


def effective_stops(until: list[str]) -> list[str]:
    """``until`` without the stop strings that contain another one.

    Such a string can never end a generation first, nor cut it differently: wherever it
    occurs, the string it contains occurs at or before it, and stock truncation splits at
    every stop string in turn. Dropping them lets requests that differ only there (BELIEF's
    K samples carry ``<first stop><belief-sample i>`` to stay distinct in the cache) share
    one prefill and one decoding batch."""
    kept: list[str] = []
    for s in until:
        if s in kept or any(o and o != s and o in s for o in until):
            continue
        kept.append(s)
    return kept


def is_seeded_sample(args) -> bool:
    """Whether the ``generate_until`` arguments ``(context, kwargs)`` sample with their own ``seed``."""
    kwargs = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
    return bool(kwargs.get("do_sample")) and kwargs.get("seed") is not None
