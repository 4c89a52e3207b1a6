"""Shim: lm-eval resolves ``!function utils.<name>`` here. The glue lives in belief_tasks.tasks.belief_mlm, the
aggregations in belief_tasks.scoring.belief_mlm (tests/test_metric_tables.py checks them against its METRICS)."""

from belief_tasks.scoring.belief_mlm import (  # noqa: F401  the aggregations the YAMLs' metric_list names
    acc_at_1,
    acc_at_1_range,
    acc_at_1_sd,
    acc_at_10,
    bias_multi,
    bias_single,
    consist,
    mrr,
    overconf_at_1,
    overconf_at_10,
    overconf_at_10_maxprob,
    prompts_dropped,
    prompts_kept,
)
from belief_tasks.tasks.belief_mlm import (  # noqa: F401
    BeliefMLMTask,
    bear_docs,
    myriadlama_bias_docs,
    myriadlama_docs,
    process_content_free,
    process_prompt,
)
