"""Scoring, one pure module per family: logged records -> arrays -> numbers.

``belief_tasks/scoring/<family>.py`` holds the family's record type and its columns (records -> the
arrays ``belief_tasks.metrics.<family>`` takes), its known-fact rule (``known``), every aggregation with
its standard error, and ``METRICS`` (metric name -> (aggregation, higher is better)): what the task
YAMLs wire and what ``belief-report`` recomputes. ``common.py`` holds what the families share.

Pure: numpy through ``belief_tasks.metrics``; no lm-eval, no torch, no transformers.
"""
