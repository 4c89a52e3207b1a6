"""A run's phases read from the state of its requests (``planning.evaluate_watch``), against lm-eval's own
``evaluate``: a model that asks the state which phase runs each time lm-eval calls it. No task reports a phase and no
model method is wrapped (the task layer does not import the cost stack)."""

from __future__ import annotations

import pytest

from belief_tasks.planning import progress
from belief_tasks.planning.evaluate_watch import RequestState, tasks_of

from harness import ROOT
from layout_checks import imports_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def loaded_tasks(model_path, names: list[str]) -> dict:
    from lm_eval.tasks import TaskManager

    from belief_tasks.paths import task_yamls_dir

    metadata = {"source": "sample", "relations": "P36", "pretrained": str(model_path)}
    return TaskManager(include_path=str(task_yamls_dir()), include_defaults=False, metadata=metadata).load(names)


def recording_model(state_of: list, seen: list):
    """lm-eval's ``dummy`` model, which records, at each call lm-eval makes, the request type and the phase the
    requests' state says runs, and whether the call reached a method of the class (nothing set on the instance)."""
    from lm_eval.models.dummy import DummyLM

    class Recording(DummyLM):
        def _seen(self, request_type: str) -> None:
            seen.append((request_type, state_of[0].phase(), request_type in vars(self)))

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            self._seen("loglikelihood")
            return super().loglikelihood(requests, disable_tqdm)

        def generate_until(self, requests, disable_tqdm: bool = False):
            self._seen("generate_until")
            return super().generate_until(requests, disable_tqdm)

    return Recording()


def test_the_state_of_the_requests_names_the_phase_lm_eval_is_in(model_path):
    import belief_tasks

    belief_tasks.install()
    from lm_eval.evaluator import evaluate

    names = ["belief_demo_monitor", "belief_demo_bear"]  # MONITOR asks for both kinds of request, BEAR one
    task_dict = loaded_tasks(model_path, names)
    tasks = tasks_of(task_dict)
    assert [t.config.task for t in tasks] == names
    state_of: list = [RequestState(tasks)]
    assert state_of[0].phase() == progress.BUILDING_REQUESTS and not state_of[0].built()
    seen: list = []
    evaluate(lm=recording_model(state_of, seen), task_dict=task_dict)
    expected = {"loglikelihood": progress.scoring_phase("loglikelihood")}
    expected["generate_until"] = progress.scoring_phase("generate_until")
    assert seen and all(phase == expected[rt] and not wrapped for rt, phase, wrapped in seen), seen
    # lm-eval calls each request type once, in the order the types first appear across the tasks
    order = list(dict.fromkeys(i.request_type for t in tasks for i in t.instances))
    assert [rt for rt, _, _ in seen] == order and len(order) == 2
    assert state_of[0].phase() == progress.RECORDING
    # the same tasks handed to a second evaluate: their old requests do not count as built for it
    again = RequestState(tasks)
    assert again.phase() == progress.BUILDING_REQUESTS


def test_no_task_module_imports_the_cost_stack():
    planning = {f"belief_tasks.planning.{p.stem}" for p in (ROOT / "belief_tasks" / "planning").glob("*.py")}
    planning |= {"belief_tasks.planning"}
    found = {p.name: imports_of(ROOT, p, planning) for p in sorted((ROOT / "belief_tasks" / "tasks").glob("*.py"))}
    assert found and not any(found.values()), found
