"""Shim: lm-eval resolves ``!function utils.<name>`` in this folder. The glue lives in
belief_tasks.tasks.belief_mlm; the metrics are wired by the task class from belief_tasks.scoring.belief_mlm.METRICS."""

from belief_tasks.tasks.belief_mlm import (  # noqa: F401
    BeliefMLMBiasTask,
    BeliefMLMTask,
    bear_docs,
    myriadlama_bias_docs,
    myriadlama_docs,
    process_content_free,
    process_prompt,
)
