"""Scoring, one pure module per family: logged records -> arrays -> numbers.

``belief_tasks/scoring/<family>.py`` holds the family's record type and its columns (records -> the
arrays ``belief_tasks.metrics.<family>`` takes), its known-fact rule (``known``), every aggregation and
its standard error, and ``METRICS`` (metric name -> ``common.Metric``: aggregation, standard error or
``NoStderr``, higher is better, and its budgeted statistic from ``belief_tasks.metrics.budgeted.<family>`` or
``NotEstimable``), the one declaration of each metric: what the task classes wire (through ``wiring.py``),
what ``belief-report`` recomputes and what a budgeted run estimates. ``common.py`` holds what the families
share, ``budgeted.py`` a budgeted run's estimates.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch, no transformers.
"""
