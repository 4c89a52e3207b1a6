"""Shim: lm-eval resolves ``!function utils.<name>`` here; the code lives in belief_tasks.tasks.belief_mlm."""

from belief_tasks.tasks.belief_mlm import (  # noqa: F401
    BeliefMLMTask,
    acc_at_1,
    acc_at_1_range,
    acc_at_1_sd,
    acc_at_10,
    bear_docs,
    bias_multi,
    bias_single,
    consist,
    mrr,
    myriadlama_bias_docs,
    myriadlama_docs,
    overconf_at_1,
    overconf_at_10,
    overconf_at_10_maxprob,
    process_content_free,
    process_prompt,
    prompts_dropped,
    prompts_kept,
)
