"""Harness glue, one module per family: documents, requests, the task class and building one record.

What a family's records are worth (record type, known-fact rule, aggregations, ``METRICS``) lives in
``belief_tasks.scoring.<family>``; its knobs and its place in the registry in ``belief_tasks.families``.
A task's glue module is named by its YAML (``class:``, ``custom_dataset:``), which is how lm-eval and
``belief-eval`` find it: no list of glue modules is kept.
"""
