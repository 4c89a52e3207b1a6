"""What every family's harness task shares, written once.

* ``BeliefTask``: the ``ConfigurableTask`` subclass every task YAML of ours names in ``class:``.
  It installs our harness hooks, drops the ``class`` key lm-eval passes along, parses the
  family's knobs (``OPTIONS``, a ``families.<Family>Options``) from the task's metadata once
  (``read_options``), hands them to its ``custom_dataset`` function, and builds ``Instance`` objects.
* ``check_budget``: every rule of the ``budget`` knob beyond its value (which its ``Knob`` row parses).
* ``select_facts``: the common knobs (``relations``, ``max_facts_per_relation``, ``budget``) applied,
  seeded; under a budget it computes the run's ``Draw``, which the documents carry on to the task
  (``DocList.draw``, ``BeliefTask.draw``).
* ``as_split`` / ``unpack``: docs (plain dicts) into the ``{"test": DocList}`` that
  ``custom_dataset`` returns (a list lm-eval reads like a ``datasets.Dataset``), and nested values
  back out.
* ``model_tokenizer``: the evaluated model's tokenizer, for the tasks that count or cut its tokens.
"""

from __future__ import annotations

import functools
import json
import logging
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, Sequence, TypeVar

from lm_eval.api.instance import Instance
from lm_eval.api.task import ConfigurableTask

from belief_tasks import options
from belief_tasks.data.sources import SOURCE_KNOBS, DataSourceError
from belief_tasks.facts import budget, seeding
from belief_tasks.facts.budget import Draw
from belief_tasks.facts.schema import Fact, FactSet, SchemaError, sampling_key
from belief_tasks.facts.shard import ShardCutError, block, relation_counts
from belief_tasks.families import FAMILIES, budget_estimators, knob_names
from belief_tasks.hooks import harness, lm_eval_api, preflight, truncation
from belief_tasks.options import Knob, KnobError, ModelArgs, Options, knob_rows, parse_options, parse_values
from belief_tasks.scoring import wiring
from belief_tasks.scoring.budgeted import missing
from belief_tasks.scoring.common import Metric, logged_once

log = logging.getLogger(__name__)

#: a family's knobs (``families.<Family>Options``), the type of its tasks' ``options``
OptionsT = TypeVar("OptionsT", bound=Options)


class BeliefTask(ConfigurableTask, Generic[OptionsT]):
    """Base of every task class of ours; a family's class sets ``FAMILY`` and ``OPTIONS`` (its knobs' dataclass,
    ``families.<Family>Options``) and subclasses ``BeliefTask[<Family>Options]``, so that ``options`` is typed.

    Each doc's record is logged once (``process_results``); a family's class overrides ``score_doc``.

    The results JSON records, in the task's ``metadata``, its ``family`` and its ``probe``: the name of
    the task that defines its data (``belief_demo_bear`` includes ``belief_bear``: probe ``belief_bear``),
    taken from the ``custom_dataset`` function (``probe`` decorator). ``belief-report`` reads both.

    Knobs are parsed and checked once, when the task is built (``options``); the ``custom_dataset`` function
    receives them, and under a budget returns its documents with the ``Draw`` (``draw``), which the results
    JSON records as ``budget_design``.
    """

    FAMILY = ""
    OPTIONS: type[OptionsT]
    #: True when the class scores a doc itself (several request types per doc): lm-eval then needs
    #: a ``process_results`` in the config so that it does not look our metric names up on the hub.
    SCORES_ITSELF = False
    #: what a request cut to the model's context would lose, for a probe defined by its whole context
    #: ("" when a cut is only recorded): such a task refuses to run unless ``allow_truncation`` is set
    WHOLE_CONTEXT = ""
    #: the budget's draw behind this task's documents (``budget.Draw``); None without a budget
    draw: Draw | None = None

    def __new__(cls, config: dict | None = None, **kwargs: Any) -> BeliefTask:
        """lm-eval 0.5 instantiates a ``class:`` task as it is: our class joined with its output type's
        (``lm_eval_api.task_class``; on 0.4 the class itself)."""
        return super().__new__(lm_eval_api.task_class(cls, (config or {}).get("output_type")))

    def __init__(self, config: dict | None = None, **kwargs: Any) -> None:
        harness.install()
        cfg = {k: v for k, v in (config or {}).items() if k != "class"}
        if cfg.get("task"):
            harness.OUR_TASKS.add(cfg["task"])
        with building(cfg.get("task")):
            self._options: OptionsT = read_options(cfg.get("metadata"), self.OPTIONS, self.FAMILY)
            #: an unknown metadata key, warned of when the requests are built unless the command that knows the run's
            #: model arguments hands them over first (``declare_model_args``)
            self.unknown_key = unknown_key(cfg.get("metadata"), self.OPTIONS)
            cfg["metadata"] = {**(cfg.get("metadata") or {}), **stamp(cfg, self.FAMILY)}
            # the family's METRICS wire the task (no YAML repeats them), with a budgeted run's intervals
            cfg["metric_list"] = wiring.metric_list(
                self.FAMILY, self.metric_table(cfg), budget_estimators(self.FAMILY), self._options.budget is not None
            )
            self._intervals = wiring.intervals_of(cfg["metric_list"])
            #: the names of the metrics this task reports (its ``metric_list``, as wired)
            self.reported = frozenset(e["metric"] for e in cfg["metric_list"])
            cfg["metric_list"] = lm_eval_api.metric_list(cfg["metric_list"])
            if self.SCORES_ITSELF:
                cfg["process_results"] = _scored_by_task
            super().__init__(config=cfg, **kwargs)

    def metric_table(self, config: Mapping[str, Any]) -> Mapping[str, Metric]:
        """metric -> its declaration (``scoring.common.Metric``) this task reports: its family's ``METRICS``, the one
        declaration of a metric (a class may report part of it, as BEAR on some templates)."""
        return FAMILIES[self.FAMILY].metrics

    def download(self, dataset_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Our tasks build their documents with their ``custom_dataset`` function (``probe``), handed the task's
        parsed knobs (``options``); it returns them with the budget's draw (``DocList.draw``), which the task keeps
        (``draw``) and the results JSON records (``budget_design``). A function not marked ``probe`` gets lm-eval's
        call (the metadata as keyword arguments), without its warning that asks every run to read about
        ``--metadata``."""
        build = self.config.custom_dataset
        if not callable(build):
            return super().download(dataset_kwargs, **kwargs)
        if not isinstance(build, Probe):
            self.dataset = build(**(self.config.metadata or {}), **(self.config.dataset_kwargs or {}))
            return None
        self.dataset = build(self.options)
        if self.options.shard is not None:
            self.dataset = {split: shard_docs(docs, self.options.shard) for split, docs in self.dataset.items()}
            # what belief-report pools by: the relations this shard holds (the user's ``relations`` knob stays)
            held = (d["relation"] for docs in self.dataset.values() for d in docs)
            self.config.metadata["shard_relations"] = list(relation_counts(held))
        self.draw = getattr(next(iter(self.dataset.values()), None), "draw", None)
        if self.draw is not None:  # the results JSON's configs carry the task's metadata
            self.config.metadata["budget_design"] = self.draw.summary()
        return None

    def process_results(self, doc: dict, results: list) -> dict:
        """The doc's metric values (``score_doc``), its record written once in the samples file: under the
        first metric, and a ``SameRecord`` reference under the others (``scoring.common.logged_once``). On a
        budgeted run each ``<metric>_ci95`` reads the record of its metric (``scoring.wiring.IntervalOf``)."""
        values = self.score_doc(doc, results)
        for name, of in self._intervals.items():
            if of in values:
                values[name] = values[of]
        return logged_once(values)

    def score_doc(self, doc: dict, results: list) -> dict:
        """metric -> value of one doc: the YAML's ``process_results`` (a family's class may override)."""
        return super().process_results(doc, results)

    def build_all_requests(self, *args: Any, **kwargs: Any) -> None:
        """lm-eval's, then the requests measured against the evaluated model's context, before it scores
        any of them (``belief_tasks.hooks.truncation``); on a server or engine, one probe request of each kind
        (``belief_tasks.hooks.preflight``)."""
        if self.unknown_key is not None:
            log.warning(
                "%s: %s (ignored: under a bare lm_eval a model argument cannot be told from a misspelt knob; "
                "belief-eval refuses it)",
                self.config.task,
                self.unknown_key,
            )
        super().build_all_requests(*args, **kwargs)
        truncation.check(self, harness.evaluated_model())
        preflight.check(self, harness.evaluated_model())

    def declare_model_args(self, model_args: Iterable[str]) -> None:
        """The run's model-argument keys, from the command that knows them (``belief-eval``, the sweep, the
        Trainer callback): a metadata key that is neither a knob nor one of them is refused (``KnobError``)."""
        self.unknown_key = unknown_key(self.config.metadata, self.OPTIONS, frozenset(model_args))

    @property
    def options(self) -> OptionsT:
        """The task's knobs (its ``OPTIONS``; the data source's checked too), parsed and checked once when it was
        built."""
        return self._options

    def instance(self, request_type: str, doc: dict, arguments: tuple, idx: int, kwargs: Mapping[str, Any]) -> Instance:
        """An ``Instance`` from ``construct_requests``' keyword arguments (``lm_eval_api.instance``)."""
        return lm_eval_api.instance(
            request_type, doc, arguments, idx, kwargs, self.config.task, int(self.config.repeats or 1)
        )


@contextmanager
def building(task: str | None) -> Iterator[None]:
    """Around the build of ``task``: bad input of ours raised in it (a knob, a data file, a data source) names the task
    (``SchemaError.task``, ``DataSourceError.task``), so that ``belief-eval``'s message says which task was being
    built. The innermost task wins: an error keeps the name it was given first."""
    try:
        yield
    except (SchemaError, DataSourceError) as e:
        if task and not e.task:
            e.task = task
        raise


def check_metadata(
    metadata: Mapping[str, Any] | None,
    knobs: type[Options],
    task: str | None = None,
    model_args: Iterable[str] | None = None,
) -> KnobError | None:
    """Every knob of ``knobs`` (a family's ``Options`` class) parses (type, range; ``read_options``), and no key is
    unknown (``unknown_key``), before any data is read."""
    read_options(metadata, knobs)
    return unknown_key(metadata, knobs, model_args)


def read_options(metadata: Mapping[str, Any] | None, knobs: type[OptionsT], family: str | None = None) -> OptionsT:
    """The knobs of ``knobs`` (a family's ``Options`` class) parsed from ``metadata``, the data source's
    (``SOURCE_KNOBS``) checked after them, and a budget checked (``check_budget``; for ``family``'s tasks where
    given): a task's ``options``, read once."""
    table = knob_rows(knobs) + SOURCE_KNOBS
    try:
        opts = parse_options(knobs, metadata)
        parse_values(SOURCE_KNOBS, metadata)
        check_budget(opts, family)
    except KnobError as e:  # a knob the user never set may come from the task's own YAML: say so
        involved = [k for k in table if k.name in str(e)]
        raise KnobError(e.knob, str(e).split(": ", 1)[1] + yaml_set(metadata, involved)) from None
    return opts


def unknown_key(
    metadata: Mapping[str, Any] | None, knobs: type[Options], model_args: Iterable[str] | None = None
) -> KnobError | None:
    """A key of ``metadata`` that is neither a knob nor lm-eval's own nor a model argument, as an error.

    One ``--metadata`` serves every task of a command, so a knob of any family of ours is a known key
    (only this family's are type-checked, by ``read_options``; ``belief-eval`` then refuses a knob that no task
    of the command reads: ``commands.checks.check_knobs_read``). An unknown key is refused when the run's model
    arguments are known (``model_args``: ``belief-eval`` and the sweep pass them); under a bare ``lm_eval``
    (model args merged into the metadata, indistinguishable) it is returned, and the task warns of it
    (``BeliefTask.unknown_key``)."""
    table = knob_rows(knobs) + SOURCE_KNOBS
    known = sorted(knob_names() | {k.name for k in table})
    unknown = options.unknown_keys(metadata, known + list(STAMPED), model_args)
    if not unknown:
        return None
    error = options.unknown_knob(unknown[0], known)
    if model_args is not None:
        raise error
    return error


def yaml_set(metadata: Mapping[str, Any] | None, table: Sequence[Knob]) -> str:
    """ "; max_facts_per_relation = 2 is set by this task's own YAML (...yaml), ..." for the knobs whose
    value is the one the task's YAML file sets (lm-eval records that file as ``config_source``), with the
    value that lifts each; "" when none is."""
    md = metadata or {}
    source = md.get("config_source")
    if not source or source == "inline":
        return ""
    try:
        from belief_tasks.hooks.lm_eval_api import load_yaml

        own = load_yaml(source, resolve_func=False).get("metadata") or {}
    except Exception:  # noqa: BLE001  an unreadable YAML only loses the hint
        return ""
    found = []
    for knob in table:
        if knob.name in own and md.get(knob.name) == own[knob.name]:
            lift = next((u for u in reversed(knob.unset) if isinstance(u, str) and u), None)
            how = f'; lift it with --metadata \'{{"{knob.name}": "{lift}"}}\'' if lift else ""
            found.append(
                f"{knob.name} = {own[knob.name]!r} is set by this task's own YAML ({Path(source).name}), not by the "
                f"command{how}"
            )
    return "".join(f"; {f}" for f in found)


def check_budget(
    opts: Options, family: str | None = None, *, limit: float | None = None, task: str | None = None
) -> None:
    """The one home of the ``budget`` knob's rules, beyond its value (its ``Knob`` row in ``options.COMMON``
    parses it: a fraction in (0, 1]). Nothing to check without a budget. With one:

    * never with ``max_facts_per_relation``: the budget draws each relation's facts itself, so a cap on top of
      it would make the estimates' design unknown;
    * only for a ``family`` whose metrics have budgeted estimators (``Family.budgeted``), each metric a statistic
      or a place among those a sample cannot estimate: elsewhere its numbers would be the drawn facts' plain
      values, not estimates of the full run;
    * never under ``--limit`` (``limit``, for ``task``): it would cut the drawn facts, and the estimates need
      every one of them (``belief-eval`` asks, ``commands.checks.check_budget_without_limit``).

    The records of a budgeted run are checked again where they are estimated (``scoring.budgeted.design_of``:
    every drawn fact has records), since ``belief-report`` reads runs that no such check saw."""
    if opts.budget is None:
        return
    if opts.max_facts_per_relation is not None:
        raise KnobError(
            "budget",
            "cannot be combined with max_facts_per_relation: the budget draws each relation's "
            "facts itself (use one of the two)",
        )
    if family is not None:
        est = budget_estimators(family)
        if est is None:
            which = sorted(name for name, f in FAMILIES.items() if f.budgeted is not None)
            raise KnobError(
                "budget",
                f"is not available for the {family} tasks yet (their metrics have no budgeted "
                f"estimators); it is for {', '.join(which)}",
            )
        lacking = missing(est, FAMILIES[family].metrics)
        if lacking:
            raise KnobError(
                "budget",
                f"{family}: metrics {lacking} declare no budgeted statistic (Metric.budgeted in "
                "scoring/); a budgeted run could not estimate them",
            )
    if limit is not None:
        raise KnobError(
            "budget",
            f"task {task}: a budget cannot be combined with --limit {limit:g}: a budgeted "
            "run evaluates every fact the budget draws (the budget is the way to run fewer)",
        )


class Probe:
    """A ``custom_dataset`` function marked with the task it defines (``name``) and the dataset it reads
    (``dataset``: a key of ``belief_tasks.data.sources.DATASETS``, or "sample" for a task that always reads the bundled
    sample); see ``BeliefTask``. Called as the function is; ``inspect.getsource`` reads the function's source
    through ``__wrapped__``, as lm-eval's results JSON records it."""

    def __init__(self, fn: Callable, name: str, dataset: str) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.name, self.dataset = fn, name, dataset

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> Probe:
        return self


def probe(name: str, dataset: str) -> Callable[[Callable], Probe]:
    """Mark a ``custom_dataset`` function with the task name it defines and the dataset it reads (``Probe``)."""

    def deco(fn: Callable) -> Probe:
        return Probe(fn, name, dataset)

    return deco


#: metadata keys our task classes add themselves (never user knobs)
STAMPED = ("family", "probe", "dataset", "budget_design", "shard_relations")


def stamp(config: Mapping[str, Any], family: str) -> dict[str, Any]:
    """What the results JSON should say of this task: family, probe, and the dataset its fact ids come
    from ("sample" when the bundled sample stands in for the dataset)."""
    from belief_tasks.data.sources import resolve_source

    fn = config.get("custom_dataset")
    out = {"family": family, "probe": fn.name if isinstance(fn, Probe) else config.get("task")}
    dataset = fn.dataset if isinstance(fn, Probe) else None
    if dataset == "sample":
        out["dataset"] = "sample"
    elif dataset:
        kind = resolve_source(dataset, config.get("metadata")).kind
        out["dataset"] = "sample" if kind == "sample" else dataset
    return out


def _scored_by_task(doc, results):
    raise NotImplementedError("this task's class scores its documents (process_results method)")


# --- facts and docs -----------------------------------------------------------------------------


class Selection(list):
    """The facts a run evaluates (a list, in data order), with what a budgeted draw needs to say:
    ``population``, the facts it could have drawn (the selection itself when no budget is set), and
    ``draw`` (``belief_tasks.facts.budget.Draw``; None without a budget), which the documents function hands on
    with its documents (``DocList``)."""

    population: list
    draw: Draw | None

    def __init__(self, facts: list[Fact], population: list[Fact] | None = None, draw: Draw | None = None):
        super().__init__(facts)
        self.population = self if population is None else population
        self.draw = draw

    def design(self, fact: Fact) -> dict:
        """The doc fields of a budgeted run's fact (``design_fields``); {} without a budget."""
        return {} if self.draw is None else design_fields(self.draw, fact.relation)


def design_fields(draw: Draw, relation: str) -> dict:
    """What each budgeted doc and record carries, so that aggregations over records know the design:
    the budget, its relation's population size N_r and how many of its facts were drawn, n_r. The records
    need them: ``belief-report`` recomputes a budgeted run's estimates from its samples file alone
    (``scoring.budgeted.design_of``); the docs carry them to the family's ``process_results``."""
    return {"budget": draw.budget, "population": draw.population[relation], "drawn": draw.drawn[relation]}


#: the doc / record fields of a budgeted run (``design_fields``)
DESIGN_FIELDS = ("budget", "population", "drawn")


def record_design(doc: Mapping[str, Any]) -> dict:
    """A budgeted doc's design fields, for its record ({} for a run without a budget)."""
    return {k: doc[k] for k in DESIGN_FIELDS if doc.get(k) is not None}


def select_facts(fs: FactSet, opts: Options) -> Selection:
    """The facts this run evaluates: relation filter, then either a seeded per-relation cap or a
    budget (``belief_tasks.facts.budget``); facts keep their data order.

    Both rank a relation's facts by a seeded hash of their cross-dataset key (``schema.sampling_key``),
    so probes on two datasets keep the facts they share alike wherever they keep the same share of a
    relation (docs/data.md, "One fact across datasets")."""
    check_relations(fs, opts.relations)
    by_relation = {
        rid: facts
        for rid, facts in budget.group_by_relation(fs.facts).items()
        if opts.relations is None or rid in opts.relations
    }
    by_relation = {rid: by_relation[rid] for rid in fs.relations if rid in by_relation}
    population = [f for facts in by_relation.values() for f in facts]
    key = lambda f: sampling_key(f, fs.relations[f.relation])  # noqa: E731
    if opts.budget is not None:
        kept, draw = budget.draw_facts(by_relation, opts.budget, opts.seed, key)
        return Selection([f for facts in kept.values() for f in facts], population, draw)
    out: list[Fact] = []
    for facts in by_relation.values():
        if opts.max_facts_per_relation is not None and len(facts) > opts.max_facts_per_relation:
            facts = seeding.smallest_hashes(facts, opts.max_facts_per_relation, opts.seed, key, "facts")
        out.extend(facts)
    return Selection(out)


def shard_docs(docs: DocList, shard: tuple[int, int]) -> DocList:
    """The docs of block K of N of their relations (``facts.shard``: the ``shard`` knob), cut after every draw over
    all of them (the budget's, BELIEF's confidence subsample, demonstrations), with the draw over that block."""
    k, n = shard
    counts = relation_counts(d["relation"] for d in docs)
    try:
        keep = set(block(counts, k, n))
    except ShardCutError:
        raise KnobError(
            "shard",
            f"{k}/{n}: this task's documents cover {len(counts)} relations, so {n} shards would leave some without "
            f"any: use at most {len(counts)} shards",
        ) from None
    return DocList((d for d in docs if d["relation"] in keep), docs.draw.over(keep) if docs.draw else None)


def check_relations(fs: FactSet, relations: Sequence[str] | None) -> None:
    unknown = sorted(set(relations or ()) - set(fs.relations))
    if unknown:
        raise KnobError("relations", f"unknown relations {unknown} for {fs.source}; known: {sorted(fs.relations)}")


class DocList(list):
    """A split's docs as plain dicts, with what ``ConfigurableTask`` reads of a ``datasets.Dataset``
    (``len``, indexing, iteration and ``features``, whose keys name the fields ``doc_to_text`` /
    ``doc_to_target`` may look up). No Arrow table: building one copied every doc, and every access
    made another copy, which an instance then kept (docs/scale.md).

    ``draw``: the budget's ``Draw`` behind the docs (None without a budget), handed from the documents
    function to the task (``BeliefTask.draw``)."""

    def __init__(self, docs: Iterable = (), draw: Draw | None = None):
        super().__init__(docs)
        self.draw = draw

    @property
    def features(self) -> dict:
        return dict.fromkeys(self[0]) if self else {}

    def __getitem__(self, key):
        """A column by name (``dataset["relation"]``), else a doc or a slice, as a ``Dataset`` answers."""
        if isinstance(key, str):
            return [d[key] for d in self]
        return super().__getitem__(key)

    def to_list(self) -> list[dict]:
        """The docs as a list of dicts (``datasets.Dataset.to_list``)."""
        return [dict(d) for d in self]


def as_split(docs: list[dict], split: str = "test") -> dict[str, DocList]:
    """``{split: DocList}`` for ``custom_dataset``. Docs look as a ``Dataset`` row did: nested values
    are JSON strings (read them with ``unpack``), and every doc has every field (absent ones None).
    The draw of ``docs`` (a ``DocList``) goes with them, over the relations they hold (``Draw.over``)."""
    if not docs:
        raise KnobError("relations", "no documents to evaluate: check relations / max_facts_per_relation")
    keys = dict.fromkeys(k for d in docs for k in d)
    draw = getattr(docs, "draw", None)
    if draw is not None:
        draw = draw.over(d["relation"] for d in docs)
    return {split: DocList(({k: _flat(d.get(k)) for k in keys} for d in docs), draw)}


def _flat(value: Any) -> Any:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict, tuple)) else value


def unpack(doc: Mapping[str, Any], key: str):
    """A nested value of a doc, read back from the JSON string ``as_split`` stored (a value that is
    not such a string is returned as it is)."""
    value = doc[key]
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


# --- the evaluated model's tokenizer -------------------------------------------------------------------


def model_tokenizer(metadata: Mapping[str, Any] | None, *, needed_for: str):
    """The evaluated model's tokenizer from the model args lm-eval merges into the task metadata
    (``tokenizer=``, else ``pretrained=``, else ``model=``); ``needed_for`` says why, in the error."""
    opts = parse_options(ModelArgs, metadata)
    name = opts.tokenizer or opts.pretrained or opts.model
    if not name:
        raise KnobError(
            "pretrained",
            f"{needed_for} needs the evaluated model's tokenizer and found none in the model args: pass "
            "--model_args pretrained=... (or tokenizer=...); from Python, put pretrained in the TaskManager's metadata",
        )
    return _load_tokenizer(name, opts.revision, opts.trust_remote_code, needed_for)


@lru_cache(maxsize=8)
def _load_tokenizer(name: str, revision: str | None, trust_remote_code: bool, needed_for: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name, revision=revision or "main", trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001  one clear message instead of transformers' traceback
        raise KnobError(
            "tokenizer",
            f"{needed_for} could not load the tokenizer {name!r} of the evaluated model ({type(e).__name__}: {e}); "
            "pass tokenizer=<local folder or hub id> in --model_args",
        ) from e
