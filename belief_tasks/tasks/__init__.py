"""Harness glue, one module per family: documents, requests, the task class and building one record.

What a family's records are worth (record type, known-fact rule, aggregations, ``METRICS``) lives in
``belief_tasks.scoring.<family>``; its knob table and its place in the registry in ``belief_tasks.families``.
"""
