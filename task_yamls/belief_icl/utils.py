"""Shim: lm-eval resolves ``!function utils.<name>`` in this folder. The glue lives in
belief_tasks.tasks.belief_icl; the metrics are wired by the task class from belief_tasks.scoring.belief_icl.METRICS."""

from belief_tasks.tasks.belief_icl import (  # noqa: F401
    BeliefICLTask,
    mp_4random,
    mp_4relation,
    mp_4template,
    mp_zeroshot,
    process_results,
    prompt_slot,
    qa_4random,
    qa_4relation,
    qa_4template,
    qa_zeroshot,
)
