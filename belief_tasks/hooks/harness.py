"""Every place where we plug into lm-eval itself, installed by one explicit call: ``install()``.

``belief-eval``, our backends and our task classes call it; ``import belief_tasks`` does not.
Each patch was written for lm-eval 0.4.13 and is tested on the releases of ``TESTED`` (``pyproject.toml``'s
range, ``LM_EVAL_RANGE``); another installed release gets a warning naming the range, and a patched attribute
that no longer exists is a clear error. What each
hook changes, for whose requests, and why no public route serves: docs/architecture.md ("What we
replace in lm-eval"). A hook that changes how a request is served touches requests of our tasks
only (``OUR_TASKS``), or requests only ours can carry.

1. Model backends (``hf-mlm``, ``hf-shared``, ``vllm-shared``, ``vllm-serve-shared``) are registered after
   ``lm_eval.models``: ``get_model`` imports it only when the registry is empty, so registering first
   would hide every built-in model.
2. Standard errors for corpus-level aggregations: lm-eval asks ``stderr_for_metric(agg_fn)`` and
   knows only its own functions, so our aggregations (consistency, fluctuation, MONITOR, ...)
   would always print "N/A". An aggregation of ours (``scoring.wiring.Reported``, built from the
   metric's ``Metric``) gets its ``stderr``, the one ``belief-report`` recomputes with: a float, or
   ``NoStderr(reason)``, which is lm-eval's "N/A" carrying why.
   ``--bootstrap_iters 0`` still turns all off. (A budgeted run's intervals need no hook: each is a
   ``metric_list`` entry ``<metric>_ci95`` of its own, ``scoring.wiring.IntervalOf``.)
3. (no patch) ``--use_cache`` for our own request types: lm-eval's ``CachingLM`` reads its database only for
   ``loglikelihood``, ``loglikelihood_rolling`` and greedy ``generate_until``, passes every other request
   through, and hands the model it wraps the database (``CacheHook.dbdict``). Our backends read it
   themselves in their own methods through ``read_through``, the one home of our cache reads, keyed as
   lm-eval keys: ``per_token_loglikelihood`` (``hf-shared``), ``mask_topk`` and ``loglikelihood_span``
   (``hf-mlm``), and the sampled generations of our tasks that carry their own ``seed`` (``hf-shared``;
   stock ``hf`` through 5.), which lm-eval writes but never reads. The database itself is written in batches
   (``batch_cache_writes``, from 7.): lm-eval's ``SqliteDict`` commits each answer alone; and ``CachingLM``'s
   own request methods are served by ``cached_call`` (an attribute of the instance, before its ``__getattr__``),
   which keys each request once where lm-eval hashes it twice.
4. (none: data parallelism on CPU is a property of ``hf-shared`` and ``hf-mlm``, not a patch of
   ``HFLM``; stock ``hf`` runs the whole task in every CPU process, as lm-eval does.)
5. Per-request sampling seeds on ``hf`` (``HFLM.generate_until``, the one patch that serves requests):
   BELIEF's sampled requests carry a ``seed`` in their generation kwargs (vLLM's ``SamplingParams``
   and OpenAI-style servers take it as is); stock ``hf`` has no per-request seed (its ``generate``
   refuses the kwarg) and batches identical kwargs only. ``generate_until`` hands the seeded samples of
   our tasks (``seeded_sample_of_ours``), and only those, to ``belief_tasks.hooks.hf_sampling``: decoded in
   shared ``generate`` calls, each row drawing from its own generator seeded with its seed, or, where
   that path does not apply (other kwargs, seq2seq, a subclass's own ``_model_generate``,
   ``BELIEF_HF_SEEDED_SAMPLING=one-by-one``), alone through stock with the seed popped, under
   ``torch.manual_seed(seed)``. A call without such a request, and every other request of a call,
   goes to lm-eval's own ``generate_until`` as it came; under ``--use_cache`` the seeded samples of
   ours are read back (3.).
6. (``belief-eval`` only) the tasks are built before the model: ``install_tasks_before_model``.
7. The evaluated model, seen by the tasks while they build their requests (and, under ``belief-eval``, when
   the call begins and ends, for its progress: ``belief_tasks.planning.progress``): lm-eval's ``evaluate`` hands
   the model to no task, and ``hf`` / ``hf-shared`` cut a request longer than ``max_length`` from the left with
   only a log line.
   ``evaluated_model()`` is the model of the ``evaluate`` call in progress, so ``BeliefTask`` measures its
   requests before any is scored (``belief_tasks.hooks.truncation``: recorded in the results JSON, or refused).
   Under ``--use_cache`` the same wrapper puts an ``AnswerStore`` (``hooks/answer_store.py``: the same file, one
   transaction a second) in place of ``CachingLM``'s ``SqliteDict`` for the call (``batch_cache_writes``).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from belief_tasks.backend_registry import targets
from belief_tasks.hooks import lm_eval_api
from belief_tasks.hooks.lm_eval_api import LM_EVAL_RANGE, TESTED, hash_args

log = logging.getLogger(__name__)

_MARK = "_belief_tasks"
_installed = False

#: the names of the tasks of ours built in this process (``BeliefTask`` adds each): a hook that changes how a
#: request is served touches only requests of these tasks
OUR_TASKS: set[str] = set()


def is_ours(request) -> bool:
    """Whether an lm-eval ``Instance`` belongs to a task of ours (``OUR_TASKS``)."""
    return getattr(request, "task_name", None) in OUR_TASKS


def install() -> None:
    """Register our backends and install every hook (once per process)."""
    global _installed
    if _installed:
        return
    found = lm_eval_api.version()
    if found not in TESTED:
        log.warning(
            "belief-tasks: our lm-eval hooks are tested on lm-eval %s (lm-eval%s) and this is %s; they check "
            "what they patch, but results of lm-eval's private code paths may differ",
            " and ".join(TESTED),
            LM_EVAL_RANGE,
            found,
        )
    register_backends()
    install_stderr_hook()
    install_generation_seed_hook()
    install_evaluated_model_hook()
    _installed = True


def register_backends() -> None:
    """Our backends (``backend_registry``) in lm-eval's model registry, each imported when a run asks for it."""
    lm_eval_api.register_lazily(targets())


def _patch(hook: str, make: Callable[[Any], Any], what: str) -> None:
    """Replace the attribute of ``hook`` (``lm_eval_api.patch_points``: where it lives in this release) by
    ``make(original)`` once; a missing attribute is a clear error."""
    owner, attr = lm_eval_api.patch_points()[hook]
    original = getattr(owner, attr, None)
    if original is None:
        raise RuntimeError(
            f"belief-tasks cannot install its hook for {what}: {owner.__name__}.{attr} does not exist in "
            f"lm-eval {lm_eval_api.version()} (tested on {' and '.join(TESTED)}). Install 'lm-eval{LM_EVAL_RANGE}'."
        )
    probe = original.fget if isinstance(original, property) else original
    if getattr(probe, _MARK, False):
        return
    new = make(original)
    setattr(getattr(new, "fget", new), _MARK, True)
    setattr(owner, attr, new)


# --- 2. stderr of our aggregations ---------------------------------------------------------------


def install_stderr_hook() -> None:
    from belief_tasks.scoring.wiring import Reported

    def make(original):
        def stderr_for_metric(metric, bootstrap_iters):
            if not isinstance(metric, Reported):  # lm-eval's own aggregations, and any other task's
                return original(metric=metric, bootstrap_iters=bootstrap_iters)
            # a float, or NoStderr(reason): lm-eval's own "N/A", which it prints and writes into the results JSON
            return metric.stderr if bootstrap_iters > 0 else None

        return stderr_for_metric

    _patch("stderr", make, "standard errors of custom aggregations")


# --- 3. the cache: read by our backends themselves ----------------------------------------------


def cache_of(lm):
    """The ``--use_cache`` database of the backend ``lm``, or None: lm-eval's ``CachingLM`` hands the model it
    wraps a ``CacheHook`` (``set_cache_hook``) whose ``dbdict`` is its own SqliteDict (``CacheHook(None)``,
    every model's default, holds None)."""
    return getattr(getattr(lm, "cache_hook", None), "dbdict", None)


def batch_cache_writes(lm) -> Any:
    """Under ``--use_cache`` (``lm`` is lm-eval's ``CachingLM``): its ``SqliteDict``, one transaction per answer,
    replaced by an ``AnswerStore`` on the same file (``hooks/answer_store.py``: one transaction a second, the same
    format), in ``CachingLM`` and in the hook it handed the model it wraps; and its request methods served by
    ``cached_call`` (each request's key computed once, not twice). Returns the store, or None."""
    import functools

    from belief_tasks.hooks.answer_store import AnswerStore
    from belief_tasks.hooks.lm_eval_api import CACHED_REQUEST_TYPES, is_caching

    if not is_caching(lm):
        return None
    old = lm.dbdict
    if isinstance(old, AnswerStore):
        return old
    old.close()  # sqlitedict's thread ends; every answer it was handed is committed
    store = AnswerStore(old.filename)
    lm.dbdict = store
    hook = getattr(lm.lm, "cache_hook", None)
    if hook is not None and getattr(hook, "dbdict", None) is old:
        hook.dbdict = store
    for request_type in CACHED_REQUEST_TYPES:  # an instance attribute comes before CachingLM's __getattr__
        setattr(lm, request_type, functools.partial(cached_call, lm, request_type))
    return store


def cached_call(caching_lm, request_type: str, requests: list) -> list:
    """lm-eval's ``CachingLM`` request method, with one key per request: its own hashes each request twice (to
    look it up, then to write its answer), which on a fast model costs more than the cache's writes
    (docs/scale.md, "What it costs"). The same reads, the same keys and the same log line; a sampled
    ``generate_until``, which lm-eval never reads back, is not written either (a backend that reads its seeded
    samples back writes them itself, ``read_through``)."""
    lm_eval_api.CACHE_LOG.info(
        "Loading '%s' responses from cache '%s' where possible...", request_type, caching_lm.cache_db
    )
    greedy = (lambda req: not req.args[1].get("do_sample", False)) if request_type == "generate_until" else None
    inner = caching_lm.lm
    results, found, _ = _through(caching_lm.dbdict, request_type, requests, getattr(inner, request_type), greedy)
    lm_eval_api.CACHE_LOG.info("Cached requests: %d, Requests remaining: %d", found, len(requests) - found)
    return results


def seeded_sample_of_ours(request) -> bool:
    """Whether a ``generate_until`` request is a sample of a task of ours that carries its own ``seed``: the
    one kind of sample that is deterministic, so a resumed run may read it back (lm-eval never reads a sample)."""
    from belief_tasks.requests import is_seeded_sample

    return is_ours(request) and is_seeded_sample(request.args)


def read_through(
    lm,
    request_type: str,
    requests: list,
    compute: Callable[[list], list],
    readable: Callable[[Any], bool] | None = None,
) -> list:
    """Answers of ``requests``: the ``readable`` ones (default: all) from the ``--use_cache`` database of the
    backend ``lm`` (``cache_of``; keyed as lm-eval keys them, ``hash_args``) where present; ``compute`` runs
    on the rest, and the readable answers it computes are written back. Without a database: ``compute``.
    The one home of our cache reads: ``hf-shared`` (``per_token_loglikelihood``, seeded samples), ``hf-mlm``
    (``mask_topk``, ``loglikelihood_span``), seeded samples on stock ``hf`` (5.), the server probes."""
    db = cache_of(lm)
    if db is None:
        return compute(requests)
    results, found, n_readable = _through(db, request_type, requests, compute, readable)
    if n_readable:  # as lm-eval's own line, of the requests this read could serve
        lm_eval_api.CACHE_LOG.info(
            "Cached requests: %d, Requests remaining: %d (%s%s)",
            found,
            n_readable - found,
            request_type,
            "" if readable is None else ", seeded samples of ours",
        )
    return results


_MISSING = object()


def _through(db, request_type: str, requests: list, compute: Callable[[list], list], readable) -> tuple[list, int, int]:
    """``requests``' answers, how many came from ``db`` and how many could: the ``readable`` ones (None: all) read
    where present, ``compute`` on the rest, the readable answers it computes written back (our store hands them to
    its writer thread at once; lm-eval's file commits them). Each request is hashed once, and only the keys of the
    requests computed are held until their answers come."""
    results: list[Any] = [None] * len(requests)
    todo: list[int] = []
    keys: list[str | None] = []
    for i, req in enumerate(requests):
        key = hash_args(request_type, req.args) if readable is None or readable(req) else None
        value = _MISSING if key is None else db.get(key, _MISSING)
        if value is _MISSING:
            todo.append(i)
            keys.append(key)
        else:
            results[i] = value
    fresh = compute([requests[i] for i in todo]) if todo else []
    for i, value in zip(todo, fresh, strict=True):
        results[i] = value
    db.update([(key, value) for key, value in zip(keys, fresh) if key is not None])  # one call for all of them
    getattr(db, "flush_soon", db.commit)()  # our store writes them beside the run; lm-eval's file at once
    found = len(requests) - len(todo)
    return results, found, found + len(keys) - keys.count(None)


# --- the launch (read by hf-mlm and belief-eval) -------------------------------------------------


def launch_world_size() -> int:
    """Processes of this launch: ``WORLD_SIZE`` as set by ``accelerate launch`` / torchrun, else 1."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


# --- 5. seeded samples on hf -----------------------------------------------------------------------


def install_generation_seed_hook() -> None:
    import functools

    from lm_eval.models.huggingface import HFLM

    def make(original):
        @functools.wraps(original)
        def generate_until(self, requests, disable_tqdm: bool = False):
            def stock(reqs):
                return original(self, reqs, disable_tqdm=disable_tqdm)

            if not any(seeded_sample_of_ours(r) for r in requests):
                return stock(requests)  # lm-eval's own code, with the requests as they came

            from belief_tasks.hooks import hf_sampling  # at call time: it imports torch and transformers

            def compute(reqs):
                return hf_sampling.generate_until(
                    self, reqs, [seeded_sample_of_ours(r) for r in reqs], disable_tqdm, stock
                )

            if type(self).generate_until is not HFLM.generate_until:  # a subclass that reads its own (hf-shared)
                return compute(requests)
            return read_through(self, "generate_until", requests, compute, readable=seeded_sample_of_ours)

        return generate_until

    _patch("seeded samples", make, "seeded samples of our tasks on hf")


# --- 6. belief-eval builds the tasks before the model ----------------------------------------------


def install_tasks_before_model(on_bad_input: Callable[[BaseException, str], None], checks: Any, progress: Any) -> None:
    """``belief-eval`` only: lm-eval's ``run`` loads the model, then builds the tasks, so a bad knob or
    data file would surface after the model load. Here the tasks are built as soon as the task manager
    exists (before ``simple_evaluate``), bad input goes to ``on_bad_input``, and ``simple_evaluate``
    then receives the tasks already built (nothing is built twice). Around the build, the command's own
    ``checks`` (the module ``belief_tasks.commands.checks``, passed in by ``belief-eval``): the backend's
    name, the task names (closest names for a typo), a metadata key that is neither a knob nor one of the
    run's ``--model_args`` keys (which the built tasks are then handed), and a knob of ours that no task of
    the command reads. ``progress`` (the module ``belief_tasks.planning.progress``, passed in by ``belief-eval`` as
    ``checks`` is) hears when the tasks are being built and when they are."""
    from belief_tasks.data.sources import DataSourceError
    from belief_tasks.facts.schema import SchemaError
    from belief_tasks.options import KnobError
    from belief_tasks.paths import task_yamls_dir

    def make(original):
        def process_tasks(self, metadata=None):
            progress.phase(progress.BUILDING_TASKS)  # belief-eval's progress
            requested = self.tasks.split(",") if isinstance(self.tasks, str) else list(self.tasks or [])
            try:
                checks.check_backend(self.model)
                with lm_eval_api.index_of(requested, self.include_path, task_yamls_dir()):  # ours alone: our index
                    manager = original(self, metadata)
            except checks.CommandError as e:
                on_bad_input(e, "")
                raise
            except ValueError:  # lm-eval's "Tasks not found", with no suggestion: say which names are close
                unknown = checks.unknown_tasks(requested, self.include_path)
                if unknown is not None:
                    on_bad_input(unknown, "")
                raise
            model_args = frozenset(self.model_args or {})
            try:
                checks.check_unknown_keys(self.metadata, model_args)
                built = manager.load(self.tasks)
                checks.declare_model_args(built["tasks"].values(), model_args)
                checks.check_knobs_read(self.metadata, built["tasks"].values(), model_args)
            except (SchemaError, DataSourceError) as e:
                on_bad_input(e, e.task)  # the task being built, named by BeliefTask (tasks.base.building)
                raise
            try:
                checks.check_budget_without_limit(built["tasks"], self.limit)
            except KnobError as e:
                on_bad_input(e, "")
                raise
            built_tasks = BuiltTasks(manager, list(self.tasks), built)
            progress.phase(progress.LOADING_MODEL)  # belief-eval's progress: the tasks are built
            return built_tasks

        return process_tasks

    _patch("tasks before the model", make, "building tasks before the model (belief-eval)")


class BuiltTasks:
    """The task manager that lm-eval's ``run`` hands to ``simple_evaluate``, holding the tasks ``belief-eval`` has
    already built: ``simple_evaluate`` asks ``load(tasks)`` for the command's task list once, and gets them
    (nothing is built twice); any other call, and everything else, is the wrapped ``TaskManager``'s own."""

    def __init__(self, manager: Any, tasks: list, built: dict) -> None:
        self._manager, self._tasks = manager, tasks
        self._built: dict | None = built

    def load(self, requested, *args, **kwargs):
        if self._built is not None and list(requested) == self._tasks and not args and not kwargs:
            built, self._built = self._built, None
            return built
        return self._manager.load(requested, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)


# --- 7. the evaluated model, while requests are built ------------------------------------------------

_evaluating: list = []  # the models of the evaluate calls in progress (innermost last)
#: told when an ``evaluate`` call begins, with (lm, task_dict); returns what to call when it ends. ``belief-eval``'s
#: run sets it (``watch_evaluate``: its progress lines and the watch of the run's requests); by default nothing
_evaluate_watcher: Callable[[Any, Any], Callable[[], None]] | None = None


def watch_evaluate(watcher: Callable[[Any, Any], Callable[[], None]] | None) -> None:
    """Have ``watcher(lm, task_dict)`` told when lm-eval's ``evaluate`` begins; it returns what to call when the call
    ends (None: nobody is told)."""
    global _evaluate_watcher
    _evaluate_watcher = watcher


def evaluated_model():
    """The model of the lm-eval ``evaluate`` call in progress, or None outside one."""
    return _evaluating[-1] if _evaluating else None


def install_evaluated_model_hook() -> None:
    import functools

    def make(original):
        @functools.wraps(original)
        def evaluate(*args, **kwargs):
            lm = kwargs["lm"] if "lm" in kwargs else args[0]
            store = batch_cache_writes(lm)
            _evaluating.append(lm)
            watcher = _evaluate_watcher
            task_dict = kwargs["task_dict"] if "task_dict" in kwargs else args[1]
            ends = watcher(lm, task_dict) if watcher is not None else (lambda: None)
            try:
                out = original(*args, **kwargs)
            finally:
                _evaluating.pop()
                if store is not None:
                    store.flush()  # every answer of the call on file, however it ended
            ends()  # belief-eval's progress: the results are written next
            return out

        return evaluate

    _patch("evaluated model", make, "the evaluated model, seen while requests are built (truncation check)")
