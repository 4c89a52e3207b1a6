"""Task knobs: declared once per family, as typed fields, read by one parser, refused by one error.

Every knob a task reads from ``--metadata`` (or the YAML's ``metadata:``) is a field of its family's
frozen dataclass (``<Family>Options`` in ``belief_tasks/families.py``, a subclass of ``Options``, whose
fields here are the knobs every task takes): ``name: type = knob(kind, default, doc, ...)``, the field's
``Knob`` row (kind, range, doc) in its metadata (``knob_rows``). ``parse_options(cls, metadata)`` checks
each value's type and range and returns a ``cls``; a bad value raises ``KnobError``, which names the knob and
what it accepts. A misspelt knob in code is an attribute the type checker does not know. Pure Python: no
lm-eval, no torch.

Values arrive as JSON (``--metadata '{"seed": 7}'``), as YAML, or as strings (model args,
environment). An integer knob takes ``7``, ``7.0`` or ``"7"``, and refuses ``2.5``,
``True`` or ``"abc"``: nothing is silently truncated.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from belief_tasks.facts.schema import SchemaError
from belief_tasks.facts.seeding import DEFAULT_SEED

METADATA = "--metadata"


class KnobError(SchemaError):
    """A ``--metadata`` value of the wrong type or range, or an unknown key."""

    def __init__(self, knob: str, message: str):
        self.knob = knob
        super().__init__(message, field=knob)
        self.file = METADATA
        self.args = (f"{METADATA} key {knob!r}: {message}",)

    def __str__(self) -> str:
        return self.args[0]


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        return int(value.strip())
    raise ValueError


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError
    out = float(value)
    if math.isnan(out):
        raise ValueError
    return out


def _fraction(value: Any) -> float:
    out = _number(value)
    if not 0 < out <= 1:
        raise ValueError
    return out


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError


def _items(value: Any) -> list:
    """A list from a list, or from a comma- (or ``|``-) separated string."""
    if isinstance(value, str):
        return [v.strip() for v in value.replace("|", ",").split(",") if v.strip()]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueError


# kind -> (converter, what it accepts, for the error message)
KINDS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "int": (_integer, "an integer"),
    "float": (_number, "a number"),
    "fraction": (_fraction, "a fraction in (0, 1]"),
    "bool": (_flag, "true or false"),
    "str": (
        lambda v: (
            v if isinstance(v, str) else str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _fail()
        ),
        "a string",
    ),
    "ids": (lambda v: tuple(str(x).strip() for x in _items(v)), "a list or comma-separated string of ids"),
    "ints": (lambda v: tuple(_integer(x) for x in _items(v)), "a list or comma-separated string of integers"),
    "floats": (lambda v: tuple(_number(x) for x in _items(v)), "a list or comma-separated string of numbers"),
    "shard": (lambda v: _shard(v), '"K/N" with 1 <= K <= N'),
}


def _fail():
    raise ValueError


def _shard(value: Any) -> tuple[int, int]:
    """``"K/N"`` (or ``[K, N]``): block K of N, 1 <= K <= N."""
    parts = value.split("/") if isinstance(value, str) else value if isinstance(value, (list, tuple)) else _fail()
    if len(parts) != 2:
        raise ValueError
    k, n = (_integer(x) for x in parts)
    if not 1 <= k <= n:
        raise ValueError
    return k, n


@dataclass(frozen=True)
class Knob:
    """One ``--metadata`` key: its name, kind, default, accepted range and a one-line doc."""

    name: str
    kind: str
    default: Any
    doc: str
    minimum: float | None = None
    choices: tuple | None = None
    #: ``None`` (or ``""``, ``"none"``, ``"all"`` where listed) means "not set": the default applies
    unset: tuple = (None, "")
    length: int | None = None  # for list kinds: exactly this many items

    def accepts(self) -> str:
        what = KINDS[self.kind][1]
        if self.choices is not None:
            what = "one of " + ", ".join(repr(c) for c in self.choices)
        if self.minimum is not None:
            what += f" >= {self.minimum:g}"
        if self.length is not None:
            what += f" ({self.length} items)"
        return what

    def parse(self, value: Any) -> Any:
        if value in self.unset or (isinstance(value, str) and value.strip().lower() in self.unset):
            return self.default
        convert = KINDS[self.kind][0]
        try:
            out = convert(value)
            if isinstance(out, str) and self.choices is not None:
                out = out.strip().lower()
        except (TypeError, ValueError):
            raise KnobError(self.name, f"{value!r} is not {self.accepts()}") from None
        items = out if isinstance(out, tuple) else (out,)
        if self.choices is not None and any(x not in self.choices for x in items):
            raise KnobError(self.name, f"{value!r} is not {self.accepts()}")
        if self.minimum is not None and any(x < self.minimum for x in items):
            raise KnobError(self.name, f"{value!r} is not {self.accepts()}")
        if self.length is not None and len(items) != self.length:
            raise KnobError(self.name, f"{value!r} is not {self.accepts()}")
        return out


#: where a knob field keeps its ``Knob`` row (``dataclasses.Field.metadata``)
_KNOB = "belief_tasks.knob"


def knob(
    kind: str,
    default: Any,
    doc: str,
    *,
    minimum: float | None = None,
    choices: tuple | None = None,
    unset: tuple = (None, ""),
    length: int | None = None,
) -> Any:
    """A knob as a field of a ``Knobs`` dataclass: ``seed: int = knob("int", 1234, "...", minimum=0)``. The
    arguments are those of its ``Knob`` row, whose name is the field's (``knob_rows``)."""
    row = {
        "kind": kind,
        "default": default,
        "doc": doc,
        "minimum": minimum,
        "choices": choices,
        "unset": unset,
        "length": length,
    }
    return field(default=default, metadata={_KNOB: row})


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """Parsed knob values of one table (a subclass's ``knob`` fields), read once (``parse_options``); ``metadata``
    is the mapping they were read from."""

    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def replace(self: K, **changes: Any) -> K:
        """The same knobs with ``changes`` (``dataclasses.replace``: no check)."""
        return dataclasses.replace(self, **changes)


K = TypeVar("K", bound=Knobs)


def knob_rows(cls: type[Knobs]) -> tuple[Knob, ...]:
    """The ``Knob`` rows of a ``Knobs`` class, in field order (a subclass's after its bases'): its knob table."""
    return tuple(Knob(f.name, **f.metadata[_KNOB]) for f in dataclasses.fields(cls) if _KNOB in f.metadata)


@dataclass(frozen=True, kw_only=True)
class Options(Knobs):
    """The knobs every task accepts (``COMMON``), the base of each family's (``families.<Family>Options``): a task
    parses its own once (``BeliefTask.options``) and hands them to its documents function.

    ``opts.metadata`` is the mapping the values were read from. Only what has readers of its own is read from
    it: the data source (``sources.resolve_source``, with its environment fallbacks) and the evaluated model's
    arguments (``tasks.base.model_tokenizer``); a knob is read from the parsed values."""

    seed: int = knob("int", DEFAULT_SEED, "seed of every draw (facts, demonstrations, samples, splits)", minimum=0)
    relations: tuple[str, ...] | None = knob(
        "ids", None, "Wikidata P-ids to evaluate, comma-separated (default: every relation)", unset=(None, "", "all")
    )
    shard: tuple[int, int] | None = knob(
        "shard",
        None,
        "evaluate block K of N of the task's relations (in data order, each block about 1/N of its documents), after "
        "every draw over all of them, so N such runs pooled give one run's numbers (belief-eval --shard_by_relation; "
        "docs/scale.md; default: every relation)",
        unset=(None, "", "none"),
    )
    max_facts_per_relation: int | None = knob(
        "int", None, "seeded cap on facts per relation (default: all)", minimum=1, unset=(None, "", "none", "all")
    )
    budget: float | None = knob(
        "fraction",
        None,
        "fraction of each relation's facts to evaluate, drawn by seeded hash and nested across "
        "budgets; metrics are then estimates of the full-data value with 95% intervals (docs/budget.md; default: "
        "every fact)",
        unset=(None, "", "none"),
    )
    allow_truncation: bool = knob(
        "bool",
        False,
        "accept that requests longer than the model's max_length are cut from the left (every probe "
        "of ours needs its whole request, so otherwise the run stops before scoring; BEAR's statements cannot be cut "
        "at all); the results JSON records the cut (docs/data.md)",
    )


#: the knobs every task accepts, as a table (docs, ``belief-eval --help``)
COMMON: tuple[Knob, ...] = knob_rows(Options)

#: The one description of truncation: docs/data.md, docs/backends.md and docs/scale.md quote it word for
#: word (``tests/test_messages.py``), and the ``allow_truncation`` knob above says the same in short.
TRUNCATION_RULE = (
    "A request longer than the model's `max_length` would be cut from the left by the backend. Every task of "
    "ours measures its requests once they are built, before any is scored; every probe of ours needs its whole "
    "request, so the run stops there (exit code 2) unless `allow_truncation: true` accepts the cut, which the "
    "results JSON then records (`truncation` in the task's metadata). BEAR's statements (`scoring: statement`, "
    "the default) are scored whole, "
    "from their first token: no backend can cut one, so `allow_truncation` cannot apply and such a run always stops."
)


@dataclass(frozen=True, kw_only=True)
class ModelArgs(Knobs):
    """Model arguments some tasks read (lm-eval's CLI merges ``--model_args`` into every task's metadata): the
    evaluated model's tokenizer, for tasks that count or cut its tokens."""

    pretrained: str | None = knob("str", None, "model args: the evaluated model (its tokenizer is loaded from here)")
    tokenizer: str | None = knob("str", None, "model args: the evaluated model's tokenizer, when not the model's own")
    model: str | None = knob("str", None, "model args: the model name of API backends (a tokenizer of that name)")
    revision: str | None = knob("str", None, "model args: the model's revision on the hub")
    trust_remote_code: bool = knob("bool", False, "model args: let transformers run the model's own code")
    add_bos_token: bool | None = knob("bool", None, "model args: whether lm-eval's hf prepends the BOS token")


MODEL_ARGS: tuple[Knob, ...] = knob_rows(ModelArgs)


def parse_options(cls: type[K], metadata: Mapping[str, Any] | None) -> K:
    """Every knob of ``cls`` read from ``metadata`` (defaults where unset), checked, in table order; ``metadata``
    kept as ``metadata``."""
    md = metadata or {}
    return cls(metadata=md, **parse_values(knob_rows(cls), md))


def parse_values(knobs: Sequence[Knob], metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """knob name -> value of every row of ``knobs`` (defaults where unset), checked in order: for tables that are
    not a dataclass (the data source's ``sources.SOURCE_KNOBS``, one row per dataset)."""
    md = metadata or {}
    return {k.name: k.parse(md.get(k.name)) for k in knobs}


#: keys lm-eval itself puts in a task's metadata (the YAML's own, and where the YAML came from)
HARNESS_KEYS = frozenset({"version", "description", "config_source", "num_fewshot"})


def unknown_keys(
    metadata: Mapping[str, Any] | None, known: Iterable[str], model_args: Iterable[str] | None = None
) -> list[str]:
    """Keys of ``metadata`` that are neither a knob in ``known``, nor lm-eval's own, nor a model argument.

    Model arguments: the run's ``model_args`` keys where the caller knows them (``belief-eval``, the sweep);
    None (a bare ``lm_eval``, where model args and knobs arrive merged): every key that is a keyword of
    lm-eval's ``HFLM`` or of our knob tables (``MODEL_ARGS``) passes, and the caller only warns.
    """
    allowed = set(known) | HARNESS_KEYS | {k.name for k in MODEL_ARGS}
    allowed |= set(model_args) if model_args is not None else _hf_model_args()
    return sorted(k for k in (metadata or {}) if k not in allowed)


def _hf_model_args() -> set[str]:
    try:
        import inspect

        from lm_eval.models.huggingface import HFLM
    except ImportError:
        return set()
    return set(inspect.signature(HFLM.__init__).parameters) - {"self", "kwargs"}


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known knob a misspelt one most likely means, for "did you mean ...?"."""
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def unknown_knob(name: str, known: Iterable[str]) -> KnobError:
    guess = closest(name, known)
    hint = f"did you mean {guess!r}? " if guess else ""
    return KnobError(name, f"unknown key; {hint}known: {', '.join(sorted(known))}")


def knob_table(knobs: Sequence[Knob]) -> str:
    """A Markdown table of ``knobs`` (for docs and ``belief-eval``'s help)."""
    rows = ["| knob | accepts | default | what |", "| --- | --- | --- | --- |"]
    rows += [f"| `{k.name}` | {k.accepts()} | {k.default!r} | {k.doc} |" for k in knobs]
    return "\n".join(rows)
