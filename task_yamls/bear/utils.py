"""Shim: lm-eval loads `!function utils.<name>` from this folder; the code lives in belief_tasks.tasks.bear."""

from belief_tasks.tasks.bear import (  # noqa: F401  the names the YAMLs look up
    BearTask,
    agg_bear,
    agg_bear_1to1,
    agg_bear_1toN,
    agg_bear_t0,
    agg_bear_t1,
    agg_bear_t2,
    agg_p_at_1,
    agg_p_at_5,
    agg_p_at_10,
    bear_big_dataset,
    bear_dataset,
    doc_to_choice,
    doc_to_target,
    doc_to_text,
    process_results,
)
