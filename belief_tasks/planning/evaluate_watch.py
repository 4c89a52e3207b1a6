"""Where lm-eval's ``evaluate`` is, read from the requests it builds and answers: nothing is wrapped or reported.

lm-eval 0.4's ``evaluate`` goes through one fixed order. It builds every task's requests (``build_all_requests``
sets each task's ``instances`` to a new list); then, one request type at a time, in the order the types first
appear across its tasks, it hands that type's requests to the model in one call and appends each answer to its
request (``Instance.resps``); then it records each document (``process_results``) and aggregates. So the
requests' own state says which phase runs (``RequestState.phase``):

* some task still has no new ``instances``: building requests;
* every task has them: scoring the first request type whose requests hold no answer yet;
* every request holds its answer: recording and aggregating (until ``evaluate`` returns: ``progress.evaluate_begins``).

A task's own checks after lm-eval's building (our truncation check, a server probe) count towards the first
scoring phase: they run after its ``instances`` are set. Only public attributes are read (``Task.instances``,
``Instance.request_type``, ``Instance.resps``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from belief_tasks.planning import progress


def tasks_of(task_dict: Any) -> list:
    """The tasks of ``evaluate``'s ``task_dict`` (``{"tasks": {name: task}, ...}``, in ``evaluate``'s order; or an
    older nesting, depth first)."""
    from lm_eval.api.task import Task

    if isinstance(task_dict, Mapping) and isinstance(task_dict.get("tasks"), Mapping):
        return [t for t in task_dict["tasks"].values() if isinstance(t, Task)]
    out, todo = [], [task_dict]
    while todo:
        item = todo.pop()
        if isinstance(item, Task):
            out.append(item)
        elif isinstance(item, Mapping):
            todo.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            todo.extend(reversed(item))
    return out


class RequestState:
    """The phase of one ``evaluate`` call, read from its tasks' requests (see the module doc)."""

    def __init__(self, tasks: list) -> None:
        self.tasks = tasks
        #: each task's requests when the call began (a task built by an earlier call still holds its old ones)
        self._before = [getattr(t, "instances", None) for t in tasks]
        #: (request type, one of its requests) in the order lm-eval scores them; None until every task is built
        self._order: list[tuple[str, Any]] | None = None

    def built(self) -> bool:
        """Whether every task holds the requests of this call."""
        if self._order is not None:
            return True
        now = [getattr(t, "instances", None) for t in self.tasks]
        if any(n is None or n is b for n, b in zip(now, self._before)):
            return False
        order: dict[str, Any] = {}
        for instances in now:
            for inst in instances or []:
                order[inst.request_type] = inst  # its last request: answered in the same loop as the first
        self._order = list(order.items())
        return True

    def phase(self) -> str:
        if not self.built():
            return progress.BUILDING_REQUESTS
        for request_type, request in self._order or []:
            if not request.resps:
                return progress.scoring_phase(request_type)
        return progress.RECORDING

    def instances(self) -> list:
        """Every request of the call's tasks (once ``built``)."""
        return [inst for t in self.tasks for inst in (t.instances or [])]
