"""Shim: lm-eval loads `!function utils.<name>` from this folder. The glue lives in belief_tasks.tasks.bear,
the aggregations in belief_tasks.scoring.bear (tests/test_metric_tables.py checks them against its METRICS)."""

from belief_tasks.scoring.bear import (  # noqa: F401  the aggregations the YAMLs' metric_list names
    agg_bear,
    agg_bear_1to1,
    agg_bear_1toN,
    agg_bear_t0,
    agg_bear_t1,
    agg_bear_t2,
    agg_confidence,
    agg_confidence_correct,
    agg_confidence_incorrect,
    agg_margin,
    agg_margin_correct,
    agg_margin_incorrect,
    agg_uncertainty,
    agg_uncertainty_correct,
    agg_uncertainty_incorrect,
    agg_brier,
    agg_p_at_1,
    agg_p_at_5,
    agg_p_at_10,
)
from belief_tasks.tasks.bear import (  # noqa: F401  the names the YAMLs look up
    BearTask,
    bear_big_dataset,
    bear_dataset,
    doc_to_choice,
    doc_to_target,
    doc_to_text,
    process_results,
)
