"""Shim: lm-eval loads `!function utils.<name>` from this folder; the code lives in belief_tasks.tasks.monitor."""

from belief_tasks.tasks.monitor import *  # noqa: F401,F403
from belief_tasks.tasks.monitor import (  # noqa: F401  explicit names lm-eval looks up
    MonitorTask, agg_acc_avg, agg_acc_frame_0, agg_acc_frame_1, agg_acc_frame_2, agg_acc_frame_3, agg_acc_frame_4,
    agg_acc_frame_5, agg_acc_frame_6, agg_acc_max, agg_acc_min, agg_acc_positive, agg_frame_prob, agg_ird,
    agg_monitor, agg_negative_prob, agg_pfd, agg_primary_prob, doc_to_target, doc_to_text, fktc_dataset,
    sample_dataset,
)
