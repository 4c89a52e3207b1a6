"""Thin shim: lm-eval loads `!function utils.<name>` from this folder. The glue lives in belief_tasks.tasks.monitor,
the aggregations in belief_tasks.scoring.monitor (tests/test_metric_tables.py checks them against its METRICS)."""

from belief_tasks.scoring.monitor import (  # noqa: F401  the aggregations the generated YAMLs' metric_list names
    agg_acc_avg,
    agg_acc_frame_0,
    agg_acc_frame_1,
    agg_acc_frame_2,
    agg_acc_frame_3,
    agg_acc_frame_4,
    agg_acc_frame_5,
    agg_acc_frame_6,
    agg_acc_max,
    agg_acc_min,
    agg_acc_positive,
    agg_acc_relation_max,
    agg_acc_relation_min,
    agg_frame_prob,
    agg_ird,
    agg_monitor,
    agg_negative_prob,
    agg_pfd,
    agg_primary_prob,
)
from belief_tasks.tasks.monitor import (  # noqa: F401
    MonitorTask,
    doc_to_target,
    doc_to_text,
    fktc_dataset,
    sample_dataset,
)
