"""Shim for the YAMLs in this folder: the glue lives in belief_tasks.tasks.iclke, the aggregations in
belief_tasks.scoring.iclke (tests/test_metric_tables.py checks them against its METRICS)."""

from belief_tasks.scoring.iclke import (  # noqa: F401  the aggregations the YAMLs' metric_list names
    acc,
    acc_at_10,
    acc_at_20,
    acc_at_30,
    acc_at_40,
    acc_at_50,
    acc_at_60,
    acc_at_70,
    acc_at_80,
    acc_at_90,
    acc_macro,
    gold_prob,
)
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
