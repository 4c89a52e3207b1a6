"""Shim: lm-eval resolves ``!function utils.<name>`` in this folder. The glue lives in
belief_tasks.tasks.monitor; the metrics are wired by the task class from belief_tasks.scoring.monitor.METRICS."""

from belief_tasks.tasks.monitor import MonitorTask, doc_to_target, doc_to_text, fktc_dataset, sample_dataset  # noqa: F401
