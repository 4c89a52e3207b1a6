"""Harness glue, one module per family: documents, requests, the task class and building one record.

What a family's records are worth (record type, known-fact rule, aggregations, ``METRICS``) lives in
``belief_tasks.scoring.<family>``; its knob table and its place in the registry in ``belief_tasks.families``.
"""


def glue_modules() -> dict:
    """family name (``belief_tasks.families.FAMILIES``) -> its glue module, where its tasks' ``custom_dataset``
    functions are (imported here, when asked: importing one glue module does not import the others)."""
    from belief_tasks.tasks import bear, belief_icl, belief_mlm, iclke, monitor

    return {"belief_icl": belief_icl, "belief_mlm": belief_mlm, "bear": bear, "iclke": iclke, "monitor": monitor}
