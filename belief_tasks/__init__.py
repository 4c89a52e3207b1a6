"""belief-tasks: factual-knowledge probes (BELIEF-ICL, BEAR, IC-LKE, MONITOR) as lm-eval tasks.

Importing the package registers our model backends (``hf-mlm``, ``hf-shared``) with
lm-eval's model registry, lazily, so that ``lm_eval.simple_evaluate(model="hf-mlm")``
works after ``import belief_tasks``. lm-eval is optional for the metrics: without it
only the registration is skipped.
"""

from __future__ import annotations

from pathlib import Path

__version__ = "0.1.0"

# In a source checkout metrics/ and task_yamls/ sit beside the package; the wheel
# maps them inside it (pyproject's package-dir). Extending __path__ gives both
# layouts the same import names: belief_tasks.metrics, belief_tasks.task_yamls.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "metrics" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))  # type: ignore[name-defined]

#: name -> "module:Class", registered lazily (nothing heavy is imported here).
BACKENDS = {
    "hf-mlm": "belief_tasks.backends.mlm:HFMaskedLM",
    "hf-shared": "belief_tasks.backends.shared:HFSharedPrefixLM",
}


def register_backends() -> None:
    """Add our backends to lm-eval's registry, after lm-eval's own models.

    ``lm_eval.models`` must be imported first: ``get_model`` imports it only when
    the registry is empty, so registering first would hide every built-in model.
    """
    try:
        import lm_eval.models  # noqa: F401
        from lm_eval.api.registry import model_registry
    except ImportError:  # metrics and loaders work without the harness
        return
    for name, target in BACKENDS.items():
        if name not in model_registry:
            model_registry.register(name, target=target)
    from belief_tasks import harness

    harness.install_stderr_hook()
    harness.install_cache_hook()
    harness.install_cpu_data_parallel_hook()
    harness.install_generation_seed_hook()


register_backends()
