"""belief-tasks: factual-knowledge probes (BELIEF-ICL, BEAR, IC-LKE, MONITOR) as lm-eval tasks.

Importing the package does nothing to lm-eval and loads neither torch nor lm-eval, so the
metrics (``belief_tasks.metrics``) are plain functions. The harness hooks (our backends
``hf-mlm`` and ``hf-shared`` in lm-eval's model registry, and the patches listed in
``belief_tasks.hooks.harness``) are installed by one explicit call, ``belief_tasks.install()``,
which ``belief-eval``, our backends and our task classes make themselves. From Python::

    import belief_tasks, lm_eval
    belief_tasks.install()
    lm_eval.simple_evaluate(model="hf-shared", ...)
"""

from __future__ import annotations

__version__ = "0.1.0"


def install() -> None:
    """Register our backends with lm-eval and install our hooks into it (idempotent)."""
    from belief_tasks.hooks import harness

    harness.install()
