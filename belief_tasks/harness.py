"""The two places where we plug into lm-eval itself, both at ``import belief_tasks``.

1. Model backends are registered lazily after ``lm_eval.models`` (``__init__``).
2. Standard errors for corpus-level aggregations: lm-eval 0.4.13 asks
   ``stderr_for_metric(agg_fn)`` and knows only its own functions, so our
   aggregations (consistency, fluctuation, MONITOR, ...) would always print "N/A".
   An aggregation that carries a ``stderr`` attribute (``tasks.common.with_stderr``)
   gets that function instead. ``--bootstrap_iters 0`` still turns all stderrs off.
"""

from __future__ import annotations


def install_stderr_hook() -> None:
    try:
        import lm_eval.evaluator_utils as eu
    except ImportError:
        return
    original = eu.stderr_for_metric
    if getattr(original, "_belief_tasks", False):
        return

    def stderr_for_metric(metric, bootstrap_iters):
        own = getattr(metric, "stderr", None)
        if own is not None:
            return own if bootstrap_iters > 0 else None
        return original(metric=metric, bootstrap_iters=bootstrap_iters)

    stderr_for_metric._belief_tasks = True
    eu.stderr_for_metric = stderr_for_metric
