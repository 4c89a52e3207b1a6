"""Thin shim: the BELIEF-ICL tasks live in belief_tasks.tasks.belief_icl, their aggregations in
belief_tasks.scoring.belief_icl (tests/test_metric_tables.py checks them against its METRICS)."""

from belief_tasks.scoring.belief_icl import (  # noqa: F401  the aggregations the YAMLs' metric_list names
    agg_acc,
    agg_acc_range,
    agg_acc_sd,
    agg_consist,
    agg_coverage_average,
    agg_coverage_maximum,
    agg_coverage_oracle,
    agg_empty_answer_rate,
    agg_one_word,
    agg_ovconf,
)
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
