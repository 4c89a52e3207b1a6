"""Thin shim: the BELIEF-ICL tasks live in belief_tasks.tasks.belief_icl."""

from belief_tasks.tasks.belief_icl import (  # noqa: F401
    BeliefICLTask,
    agg_acc,
    agg_acc_range,
    agg_acc_sd,
    agg_consist,
    agg_empty_answer_rate,
    agg_coverage_average,
    agg_coverage_maximum,
    agg_coverage_oracle,
    agg_one_word,
    agg_ovconf,
    mp_4random,
    mp_4relation,
    mp_4template,
    mp_zeroshot,
    process_results,
    qa_4random,
    qa_4relation,
    qa_4template,
    qa_zeroshot,
)
