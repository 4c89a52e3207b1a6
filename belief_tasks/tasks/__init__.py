"""Harness glue, one module per family: knobs (``KNOBS``), documents, requests, records and the metric
table (``METRICS``: metric name -> (aggregation, higher is better), what the YAMLs' ``metric_list`` wire).

``FAMILIES`` maps the ``family`` our task classes stamp into the results JSON to its module, so the
report finds every aggregation without reading the YAMLs.
"""

from __future__ import annotations

from importlib import import_module
from typing import Callable

FAMILIES = {
    "belief_icl": "belief_tasks.tasks.belief_icl",
    "belief_mlm": "belief_tasks.tasks.belief_mlm",
    "bear": "belief_tasks.tasks.bear",
    "iclke": "belief_tasks.tasks.iclke",
    "monitor": "belief_tasks.tasks.monitor",
}


def knob_names() -> set[str]:
    """Every family's knob names: one ``--metadata`` serves every task of a command (``--tasks
    belief_bear,belief_mp_zeroshot``), so a knob of one family is not an unknown key for another."""
    return {k.name for module in FAMILIES.values() for k in import_module(module).KNOBS}


def metric_table(family: str) -> dict[str, tuple[Callable, bool]]:
    """``METRICS`` of ``family`` ({} for a family we do not have)."""
    module = FAMILIES.get(family)
    return dict(import_module(module).METRICS) if module else {}
