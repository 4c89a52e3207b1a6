"""Scoring, one pure module per family: logged records -> arrays -> numbers.

``belief_tasks/scoring/<family>.py`` holds the family's record type and its columns (records -> the
arrays ``belief_tasks.metrics.<family>`` takes), its known-fact rule (``known``), every aggregation with
its standard error, and ``METRICS`` (metric name -> ``common.Metric``: aggregation, higher is better, and
its budgeted statistic from ``belief_tasks.metrics.budgeted.<family>`` or ``NotEstimable``), the one
declaration of each metric: what the task classes wire and what ``belief-report`` recomputes and a budgeted
run estimates. ``common.py`` holds what the families share.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch, no transformers.
"""
