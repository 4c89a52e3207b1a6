"""Shim: lm-eval resolves ``!function utils.<name>`` in this folder. The glue lives in
belief_tasks.tasks.iclke; the metrics are wired by the task class from belief_tasks.scoring.iclke.METRICS."""

from belief_tasks.tasks.iclke import (  # noqa: F401
    EICLKETask,
    IclkeTask,
    doc_to_choice,
    doc_to_target,
    doc_to_text,
    eiclke_bear,
    eiclke_trex_mc,
    iclke_bear,
    iclke_trex_mc,
    process_results,
)
