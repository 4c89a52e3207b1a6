"""``--use_cache`` serves our own request types and our seeded samples too (belief_tasks.hooks.harness.read_through).

lm-eval's CachingLM reads its sqlite cache only for loglikelihood, loglikelihood_rolling and greedy
generate_until, and passes every other method through; it hands the model a ``CacheHook`` whose ``dbdict``
is that database. Our backends read it there themselves (``read_through``), so a resumed MONITOR
(per_token_loglikelihood on hf-shared) or belief_mlm (mask_topk on hf-mlm) run recomputes nothing. The
fakes below are backends written as ours are: the real ones are checked in tests/test_shared_backend.py,
tests/test_mlm_backend.py and tests/test_hf_seeded_sampling.py.
"""

from __future__ import annotations

import pytest

import belief_tasks
from belief_tasks.hooks import harness
from belief_tasks.requests import CUSTOM_REQUEST_TYPES

belief_tasks.install()  # our backends and hooks


class FakeLM:
    """Answers any custom request type as our backends do: reads its cache, computes the rest (counted)."""

    def __init__(self):
        from lm_eval.api.model import CacheHook

        self.computed = 0
        self.cache_hook = CacheHook(None)

    def set_cache_hook(self, hook):
        self.cache_hook = hook

    def _compute(self, name, requests):
        self.computed += len(requests)
        out = []
        for r in requests:
            value = {"type": name, "args": list(r.args), "score": -float(len(r.args[0]))}
            self.cache_hook.add_partial(name, r.args, value)  # as our backends do, request by request
            out.append(value)
        return out

    def __getattr__(self, name):
        if name in CUSTOM_REQUEST_TYPES:
            return lambda requests, disable_tqdm=False: harness.read_through(
                self, name, requests, lambda rest: self._compute(name, rest)
            )
        raise AttributeError(name)


class Req:
    def __init__(self, *args, task_name: str = "belief_test_task"):
        self.args = args
        self.task_name = task_name


@pytest.mark.parametrize("request_type", sorted(CUSTOM_REQUEST_TYPES))
def test_custom_request_types_are_read_back_from_the_cache(tmp_path, request_type):
    from lm_eval.api.model import CachingLM

    db = str(tmp_path / "cache_rank0.db")
    first = FakeLM()
    reqs = [Req("The capital of France is", " Paris"), Req("Ottawa is in", " Canada")]
    out1 = getattr(CachingLM(first, db), request_type)(reqs)
    assert first.computed == 2

    # a new process after a crash: same db, one request more
    second = FakeLM()
    more = reqs + [Req("Rome is in", " Italy")]
    out2 = getattr(CachingLM(second, db), request_type)(more)
    assert second.computed == 1  # only the new one
    assert out2[:2] == out1 and out2[2]["args"] == ["Rome is in", " Italy"]


def test_partial_writes_survive_a_crash_mid_method(tmp_path):
    """The backend's add_partial lands in the db request by request, so a kill in the middle
    of a long per_token_loglikelihood call keeps everything computed before it."""
    from lm_eval.api.model import CachingLM

    db = str(tmp_path / "cache_rank0.db")

    class Crashing(FakeLM):
        def _compute(self, name, requests):
            super()._compute(name, requests[:2])
            raise KeyboardInterrupt  # stands in for SIGKILL after two requests

    reqs = [Req(f"prompt {i}", " x") for i in range(4)]
    with pytest.raises(KeyboardInterrupt):
        CachingLM(Crashing(), db).per_token_loglikelihood(reqs)
    resumed = FakeLM()
    out = CachingLM(resumed, db).per_token_loglikelihood(reqs)
    assert resumed.computed == 2 and [o["args"][0] for o in out] == [f"prompt {i}" for i in range(4)]


def test_lm_evals_own_types_still_go_through_lm_eval(tmp_path):
    from lm_eval.api.model import CachingLM

    class Plain(FakeLM):
        def loglikelihood(self, requests, disable_tqdm=False):
            self.computed += len(requests)
            return [(-1.0, False) for _ in requests]

    lm = Plain()
    cached = CachingLM(lm, str(tmp_path / "c_rank0.db"))
    cached.loglikelihood([Req("a", " b")])
    cached.loglikelihood([Req("a", " b")])
    assert lm.computed == 1


def test_seeded_samples_are_read_back_unseeded_ones_are_not(tmp_path):
    """BELIEF's samples carry their own seed, so they are deterministic and a resumed run reads
    them from the cache; lm-eval's rule stays for samples without one, and for every task not ours."""
    from lm_eval.api.model import CachingLM

    harness.OUR_TASKS.add("belief_test_task")

    class Gen(FakeLM):
        def generate_until(self, requests, disable_tqdm=False):
            return harness.read_through(
                self, "generate_until", requests, self._generate, readable=harness.seeded_sample_of_ours
            )

        def _generate(self, requests):
            self.computed += len(requests)
            out = [f"answer to {r.args[0]} #{self.computed}" for r in requests]
            for r, o in zip(requests, out):
                self.cache_hook.add_partial("generate_until", r.args, o)
            return out

    db = str(tmp_path / "gen_rank0.db")
    greedy = {"until": ["\n"], "do_sample": False}
    seeded = [("q", {"until": ["\n"], "do_sample": True, "temperature": 1.0, "seed": s}) for s in (11, 12)]
    unseeded = ("q", {"until": ["\n"], "do_sample": True, "temperature": 1.0})
    reqs = [Req("q", greedy), *(Req(*a) for a in seeded), Req(*unseeded)]
    first = Gen()
    out1 = CachingLM(first, db).generate_until(reqs)
    assert first.computed == 4
    second = Gen()
    out2 = CachingLM(second, db).generate_until(reqs)
    assert second.computed == 1  # only the unseeded sample is drawn again
    assert out2[:3] == out1[:3] and out2[3] != out1[3]
    # a seeded sample of a task that is not ours keeps lm-eval's rule: never read back
    stock = [Req(*seeded[0], task_name="someone_elses_task")]
    third = Gen()
    CachingLM(third, db).generate_until(stock)
    assert third.computed == 1


def test_without_use_cache_every_request_is_computed():
    lm = FakeLM()  # CacheHook(None): no database
    out = lm.mask_topk([Req("[MASK] is a city.", 3)])
    assert lm.computed == 1 and out[0]["args"] == ["[MASK] is a city.", 3]
