"""Every lm-eval internal we touch, in one module, with the differences between the releases we run on.

lm-eval's public routes are imported where they are used, as lm-eval documents them (``PUBLIC``: the classes a
task or a model subclasses or a YAML names, the registry's ``get_model``, ``simple_evaluate``, ``TaskManager``,
``EvaluationTracker``). Everything else of lm-eval that we call, read or patch is reached through this module:
its helpers (``normalize_gen_kwargs``, ``hash_args``, ...), its command line (``cli_evaluate``, ``HarnessCLI``,
``EvaluatorConfig``), its YAML loader, the request cache (``CachingLM``), the model registry's lazy
registration, the classes we recognise a backend by, and the four attributes ``hooks.harness`` patches
(``patch_points``). ``tests/test_architecture.py`` checks that no other module imports anything else of lm-eval.

Releases: 0.4.12 and 0.4.13 (``TESTED``, ``pyproject.toml``'s range, what CI runs), and the 0.5 preview
(0.5.0.dev1), where ``stderr_for_metric`` moved to ``lm_eval.api.metrics`` (the scorers call it from there),
``evaluator_utils.get_sample_size`` became private (``_get_sample_size``) and ``models.utils.resolve_max_length``
is gone, as in 0.4.12 (``max_length`` below follows ``HFLM.max_length`` there). Each difference is one branch here.

lm-eval is imported inside the functions (this module sits in the foundations layer: importing it loads
nothing of lm-eval).
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

#: the lm-eval releases our tests pass on (CI: the whole suite on the newest, the metric-table and neighbour tests
#: on the others); ``pyproject.toml`` declares ``lm-eval`` as ``LM_EVAL_RANGE`` (``tests/test_packaging.py``)
TESTED = ("0.4.12", "0.4.13")
LM_EVAL_RANGE = ">=0.4.12,<0.4.14"

#: lm-eval's public routes: module -> the names other modules of ours may import from it directly
PUBLIC: dict[str, frozenset[str]] = {
    "lm_eval": frozenset({"simple_evaluate"}),
    "lm_eval.api.instance": frozenset({"Instance"}),
    "lm_eval.api.model": frozenset({"LM"}),
    "lm_eval.api.task": frozenset({"ConfigurableTask", "Task"}),
    "lm_eval.api.registry": frozenset({"get_model"}),
    "lm_eval.tasks": frozenset({"TaskManager"}),
    "lm_eval.loggers": frozenset({"EvaluationTracker"}),
    "lm_eval.models.huggingface": frozenset({"HFLM"}),
    "lm_eval.models.vllm_causallms": frozenset({"VLLM"}),
    "lm_eval.models.openai_completions": frozenset({"LocalCompletionsAPI"}),
}

#: a kind of backend -> the lm-eval class (module, name) that makes a model of that kind (``kinds_of``)
BACKEND_CLASSES = {
    "dummy": ("lm_eval.models.dummy", "DummyLM"),
    "vllm": ("lm_eval.models.vllm_causallms", "VLLM"),
    "api": ("lm_eval.models.api_models", "TemplateAPI"),
}

#: ``HFLM.max_length``'s default where neither the config nor the tokenizer sets one (both releases)
DEFAULT_MAX_LENGTH = 2048


def version() -> str:
    """The installed lm-eval's version ("unknown" when it has no distribution metadata)."""
    try:
        return _metadata.version("lm_eval")
    except _metadata.PackageNotFoundError:
        return "unknown"


def is_preview() -> bool:
    """Whether the installed lm-eval is a 0.5 release (the preview: 0.5.0.dev1)."""
    return version().startswith("0.5")


# --- the attributes hooks.harness patches ----------------------------------------------------------------


def patch_points() -> dict[str, tuple[Any, str]]:
    """hook -> (the object that owns the attribute, the attribute's name), for this release. 0.5 calls
    ``stderr_for_metric`` from ``lm_eval.api.metrics`` (``Scorer.aggregate`` imports it from there at each call),
    0.4 from ``lm_eval.evaluator_utils``."""
    import lm_eval.evaluator as evaluator
    from lm_eval.config.evaluate_config import EvaluatorConfig
    from lm_eval.models.huggingface import HFLM

    if is_preview():
        import lm_eval.api.metrics as metrics

        stderr_home = metrics
    else:
        import lm_eval.evaluator_utils as evaluator_utils

        stderr_home = evaluator_utils
    return {
        "stderr": (stderr_home, "stderr_for_metric"),
        "seeded samples": (HFLM, "generate_until"),
        "tasks before the model": (EvaluatorConfig, "process_tasks"),
        "evaluated model": (evaluator, "evaluate"),
    }


# --- models: registration, recognition, the request cache --------------------------------------------------


def register_lazily(backends: dict[str, str]) -> None:
    """Register each ``name -> "module:Class"`` in lm-eval's model registry, imported when a run asks for it.
    After ``lm_eval.models``: ``get_model`` imports it only while the registry is empty, so registering first
    would hide every built-in model."""
    import lm_eval.models  # noqa: F401  (first: see above)
    from lm_eval.api.registry import model_registry

    for name, target in backends.items():
        if name not in model_registry:
            model_registry.register(name, target=target)


def registered_models() -> list[str]:
    """Every name lm-eval's model registry knows (ours once registered), sorted."""
    from lm_eval.api.registry import model_registry

    return sorted(model_registry.keys())


def kinds_of(lm: Any) -> set[str]:
    """The kinds of ``BACKEND_CLASSES`` whose lm-eval class ``lm`` is an instance of (by name: importing
    lm-eval's vLLM or API modules would load their libraries)."""
    names = {(c.__module__, c.__name__) for c in type(lm).__mro__}
    return {kind for kind, cls in BACKEND_CLASSES.items() if cls in names}


def model_behind_cache(lm: Any) -> Any:
    """The model itself: under ``--use_cache`` lm-eval's ``CachingLM`` wraps it."""
    from lm_eval.api.model import CachingLM

    return lm.lm if isinstance(lm, CachingLM) else lm


def is_caching(lm: Any) -> bool:
    """Whether ``lm`` is lm-eval's ``CachingLM`` (``--use_cache``)."""
    from lm_eval.api.model import CachingLM

    return isinstance(lm, CachingLM)


def hash_args(request_type: str, args: Any) -> str:
    """The key lm-eval's request cache files an answer under."""
    from lm_eval.api.model import hash_args as lm_eval_hash_args

    return str(lm_eval_hash_args(request_type, args))


def cache_hook(caching_lm: Any = None) -> Any:
    """lm-eval's ``CacheHook`` of a ``CachingLM`` (None: one that keeps nothing, every model's default)."""
    from lm_eval.api.model import CacheHook

    return CacheHook(caching_lm)


#: the request types lm-eval's ``CachingLM`` reads from its database (every other one passes through)
CACHED_REQUEST_TYPES = ("loglikelihood", "loglikelihood_rolling", "generate_until")
#: the logger lm-eval reports its cache reads on ("Cached requests: ...")
CACHE_LOG = logging.getLogger("lm_eval.api.model")


# --- lm-eval's model helpers (our backends and the hf sampling hook follow lm-eval's own code) ------------------


def normalize_gen_kwargs(*args: Any, **kwargs: Any) -> dict:
    from lm_eval.models.utils import normalize_gen_kwargs as f

    return f(*args, **kwargs)


def handle_stop_sequences(*args: Any, **kwargs: Any) -> list[str]:
    from lm_eval.models.utils import handle_stop_sequences as f

    return f(*args, **kwargs)


def postprocess_generated_text(*args: Any, **kwargs: Any) -> str:
    from lm_eval.models.utils import postprocess_generated_text as f

    return f(*args, **kwargs)


def undistribute(*args: Any, **kwargs: Any) -> list:
    from lm_eval.models.utils import undistribute as f

    return f(*args, **kwargs)


def collator(*args: Any, **kwargs: Any) -> Any:
    """lm-eval's ``Collator`` (request reordering and batching, as ``HFLM`` batches)."""
    from lm_eval.models.utils import Collator

    return Collator(*args, **kwargs)


def stop_sequences_criteria(*args: Any, **kwargs: Any) -> Any:
    from lm_eval.models.utils_hf import stop_sequences_criteria as f

    return f(*args, **kwargs)


def max_length(config: Any, tokenizer: Any) -> int:
    """A model's context length as lm-eval's ``HFLM`` resolves it, from its config (None: unreadable) and tokenizer:
    0.4.13's ``models.utils.resolve_max_length``; on 0.4.12 and 0.5, which have none, their ``HFLM.max_length``'s
    rule (the config's length attributes, then the tokenizer's ``model_max_length`` unless unset, then 2048)."""
    import lm_eval.models.utils as model_utils

    resolve = getattr(model_utils, "resolve_max_length", None)
    if resolve is not None:
        return int(resolve(config, tokenizer))
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        if config is not None and hasattr(config, attr):
            return int(getattr(config, attr))
    from lm_eval.models.huggingface import TOKENIZER_INFINITY

    found = getattr(tokenizer, "model_max_length", None)
    return DEFAULT_MAX_LENGTH if found is None or found == TOKENIZER_INFINITY else int(found)


def hf_collectives() -> dict[str, Any]:
    """``HFLM``'s collectives that lm-eval's evaluator calls on a model, for a backend of ours that is no ``HFLM``
    (``hf-mlm``): ``all_gather`` and ``barrier``, and 0.4's ``gather_object``, which 0.5's ``HFLM`` lacks (its
    evaluator gathers with ``torch.distributed`` itself)."""
    from lm_eval.models.huggingface import HFLM

    return {name: getattr(HFLM, name) for name in ("all_gather", "gather_object", "barrier") if hasattr(HFLM, name)}


def thinking(lm: Any) -> bool:
    """Whether ``HFLM`` runs with ``enable_thinking``: 0.4 keeps the attribute (0.4.13's log-likelihood refuses
    it); 0.5 keeps it only in ``chat_template_args``."""
    if hasattr(lm, "enable_thinking"):
        return bool(lm.enable_thinking)
    return bool((getattr(lm, "chat_template_args", None) or {}).get("enable_thinking"))


#: lm-eval's keyword arguments of ``construct_requests`` that ``Instance`` does not take: the chat template has
#: already shaped the context when they arrive
CHAT_KWARGS = ("apply_chat_template", "chat_template")


def instance(
    request_type: str, doc: dict, arguments: tuple, idx: int, kwargs: Mapping[str, Any], task: str, repeats: int
) -> Any:
    """A request (``Instance``) built in a task's ``construct_requests`` from the keyword arguments lm-eval called it
    with: 0.4 hands the request's place as ``metadata=(task, doc_id, repeats)``, 0.5 as ``doc_id=`` (the task's name
    and repeats are the task's own, and ``Instance`` takes each as a field)."""
    from lm_eval.api.instance import Instance

    rest = {k: v for k, v in kwargs.items() if k not in CHAT_KWARGS}
    if "doc_id" in rest:
        rest.setdefault("task_name", task)
        rest.setdefault("repeats", repeats)
        rest["metadata"] = dict(rest.get("metadata") or {})
    return Instance(request_type=request_type, doc=doc, arguments=arguments, idx=idx, **rest)


def derived_instance(request: Any, **changes: Any) -> Any:
    """A copy of ``request`` with ``changes`` (another request type or arguments) and no answers yet, in the same
    place (task, document, repeats) on either release."""
    import dataclasses

    return dataclasses.replace(request, resps=[], filtered_resps={}, **changes)


class MetricName:
    """A metric of ours as lm-eval 0.5 takes it in a ``metric_list``: a callable named by the metric. 0.5 looks a
    metric given as a string up in its registry and refuses a registered name of another output type (``acc`` in a
    ``generate_until`` task); a callable it takes by its ``__name__``. Its value comes from the task's
    ``process_results``, so lm-eval never calls it."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"metric {self.__name__}: its value comes from the task's process_results")

    def __repr__(self) -> str:
        return self.__name__


def metric_list(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A task's ``metric_list`` (``scoring.wiring.metric_list``) as this release takes it: as it is on 0.4, each
    metric a ``MetricName`` on 0.5."""
    if not is_preview():
        return entries
    return [{**e, "metric": MetricName(e["metric"])} for e in entries]


#: (task class, output type) -> the class lm-eval 0.5 instantiates (``task_class``): one per pair, so that every
#: task of a class is an instance of the same class
_TASK_CLASSES: dict[tuple[type, str], type] = {}


def task_class(cls: type, output_type: str | None) -> type:
    """The class lm-eval instantiates for a task class of ours (a ``ConfigurableTask`` subclass named by a YAML's
    ``class:``). 0.4: the class itself. 0.5: ``ConfigurableTask`` is the abstract ``Task`` and each output type has
    its own subclass (``MultipleChoiceTask``, ``GenerateTask``, ...), which ``Task.from_config`` picks but a
    ``class:`` task is not given: the class is combined with the one of its ``output_type`` (ours first)."""
    if not is_preview():
        return cls
    from lm_eval.api.task import Task

    base = Task._registry.get(output_type or "")
    if base is None or issubclass(cls, base):
        return cls
    key = (cls, output_type or "")
    if key not in _TASK_CLASSES:
        body = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        _TASK_CLASSES[key] = type(cls.__name__, (cls, base), body)
    return _TASK_CLASSES[key]


# --- tasks, the command line --------------------------------------------------------------------------------


def sample_size(task: Any, limit: float | None) -> int | None:
    """How many documents ``--limit`` leaves a task, as lm-eval counts them (0.5: a private function)."""
    import lm_eval.evaluator_utils as eu

    found = eu._get_sample_size if is_preview() else eu.get_sample_size
    out = found(task, limit)
    return None if out is None else int(out)


def load_yaml(path: Any, **kwargs: Any) -> dict:
    """A task YAML as lm-eval reads it (``!function`` tags resolved unless ``resolve_func=False``)."""
    from lm_eval.tasks._yaml_loader import load_yaml as f

    return dict(f(path, **kwargs) or {})


def tasks_folder() -> Path:
    """lm-eval's own task folder (where our wheel installs ``belief/``)."""
    import lm_eval.tasks

    return Path(lm_eval.tasks.__file__).parent


def ours_alone(requested: Sequence[Any], include_path: Any, our_folder: Path) -> str | None:
    """Our task folder, where every name in ``requested`` is a task, group or tag of ours and so lm-eval's own
    ~14,700 tasks (10-15 s to index on a CPU) need not be indexed; None otherwise: a name of lm-eval's, a YAML file
    or a folder, or an ``include_path`` other than ``our_folder`` (a user's own folder, whose groups may name
    lm-eval's tasks). ``include_path`` None: the wheel put our tasks under lm-eval's folder (``belief/``)."""
    from lm_eval.tasks import TaskManager

    if include_path is None:
        folder = tasks_folder() / "belief"
    elif isinstance(include_path, (str, Path)) and Path(include_path).resolve() == our_folder.resolve():
        folder = our_folder
    else:
        return None
    names = [n for t in requested if isinstance(t, str) for n in t.split(",")]
    if not names or not folder.is_dir() or any(n.endswith(".yaml") or Path(n).is_dir() for n in names):
        return None
    from lm_eval.utils import pattern_match

    # not TaskManager.match_tasks: 0.5's returns a name that matches nothing as it was given
    index = TaskManager(include_path=str(folder), include_defaults=False)
    return str(folder) if all(pattern_match([n], index.all_tasks) for n in names) else None


def task_manager(requested: Sequence[Any], include_path: Any, our_folder: Path, **kwargs: Any) -> Any:
    """lm-eval's ``TaskManager`` for ``requested``: over our folder alone where that holds them all
    (``ours_alone``), else over ``include_path`` and lm-eval's own tasks. The same tasks, built the same way."""
    from lm_eval.tasks import TaskManager

    folder = ours_alone(requested, include_path, our_folder)
    if folder is None:
        return TaskManager(include_path=include_path, **kwargs)
    return TaskManager(include_path=folder, include_defaults=False, **kwargs)


@contextmanager
def index_of(requested: Sequence[Any], include_path: Any, our_folder: Path) -> Iterator[None]:
    """While open, the ``TaskManager`` that lm-eval's command line builds is ``task_manager``'s: our folder alone
    where it holds every requested name."""
    import lm_eval.tasks as tasks

    original = tasks.TaskManager
    folder = ours_alone(requested, include_path, our_folder)

    class OursAlone(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, include_path: Any = None, include_defaults: bool = True, **kw: Any) -> None:
            super().__init__(*args, include_path=folder, include_defaults=False, **kw)

    if folder is not None:
        tasks.TaskManager = OursAlone
    try:
        yield
    finally:
        tasks.TaskManager = original


def parse_args_string(text: str) -> dict:
    """``key=value,key=value`` as lm-eval parses ``--model_args`` and ``--gen_kwargs``."""
    from lm_eval.utils import simple_parse_args_string

    return dict(simple_parse_args_string(text))


def results_tables(results: Mapping[str, Any]) -> str:
    """The tables lm-eval prints at the end of a run (``utils.make_table``): the tasks', then the groups' if any."""
    from lm_eval.utils import make_table

    tables = [make_table(dict(results))]
    if "groups" in results:
        tables.append(make_table(dict(results), "groups"))
    return "\n".join(tables)


def cli_evaluate() -> None:
    """lm-eval's command line (``lm_eval ...``) on ``sys.argv``."""
    from lm_eval.__main__ import cli_evaluate as f

    f()


def evaluator_config(argv: list[str]) -> Any:
    """lm-eval's ``EvaluatorConfig`` of a command line (``argv`` without the program), as ``lm_eval run`` parses
    it."""
    import sys

    from lm_eval._cli import HarnessCLI
    from lm_eval.config.evaluate_config import EvaluatorConfig

    saved = sys.argv
    sys.argv = ["belief-eval", *argv]
    try:
        namespace = HarnessCLI().parse_args()
    finally:
        sys.argv = saved
    return EvaluatorConfig.from_cli(namespace)
