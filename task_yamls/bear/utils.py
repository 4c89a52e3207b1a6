"""Shim: lm-eval resolves ``!function utils.<name>`` in this folder. The glue lives in
belief_tasks.tasks.bear; the metrics are wired by the task class from belief_tasks.scoring.bear.METRICS."""

from belief_tasks.tasks.bear import (  # noqa: F401  the names the YAMLs look up
    BearTask,
    bear_big_dataset,
    bear_dataset,
    doc_to_choice,
    doc_to_target,
    doc_to_text,
    process_results,
)
