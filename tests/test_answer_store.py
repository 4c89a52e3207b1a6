"""The answer cache written in batches (``belief_tasks.hooks.answer_store``, docs/scale.md, "Interruptions").

lm-eval's ``CachingLM`` opens its ``--use_cache`` file as ``SqliteDict(autocommit=True)``, one transaction per
answer. Under our evaluate hook (``harness.batch_cache_writes``) an ``AnswerStore`` on the same file takes its
place: one transaction a second, on commit, at exit and on SIGTERM. Checked here with lm-eval's own ``CachingLM``
and sqlitedict: the file reads back both ways; writes reach the file in one transaction, when the interval has
passed (the timer, with no later write) or on commit; a SIGTERM writes what was pending, and a SIGKILL loses only
what was pending.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import belief_tasks
from belief_tasks.hooks import harness
from belief_tasks.hooks.answer_cache import answers_held
from belief_tasks.hooks.answer_store import AnswerStore

from harness import ROOT, env_with_checkout

belief_tasks.install()


class Counting:
    """A model as lm-eval's backends are: answers each log-likelihood, hands it to the cache hook, counts."""

    def __init__(self):
        from lm_eval.api.model import CacheHook

        self.computed = 0
        self.cache_hook = CacheHook(None)

    def set_cache_hook(self, hook):
        self.cache_hook = hook

    def loglikelihood(self, requests, disable_tqdm=False):
        out = []
        for r in requests:
            self.computed += 1
            answer = (-float(len(r.args[0]) + len(r.args[1])), len(r.args[1]) % 2 == 0)
            self.cache_hook.add_partial("loglikelihood", r.args, answer)
            out.append(answer)
        return out


class Req:
    def __init__(self, *args):
        self.args = args


def requests(n: int, start: int = 0) -> list[Req]:
    return [Req(f"Fact number {i} says", f" {'x' * (i % 7)}") for i in range(start, start + n)]


def cached(db: str, batched: bool):
    from lm_eval.api.model import CachingLM

    lm = Counting()
    caching = CachingLM(lm, db)
    if batched:
        assert isinstance(harness.batch_cache_writes(caching), AnswerStore)
        assert lm.cache_hook.dbdict is caching.dbdict  # the model hands its answers to the store too
    return lm, caching


def test_the_file_reads_back_both_ways_with_lm_evals_caching_lm(tmp_path):
    db = str(tmp_path / "c_rank0.db")
    plain, caching = cached(db, batched=False)  # plain lm-eval writes 40
    first = caching.loglikelihood(requests(40))
    caching.dbdict.close()
    ours, caching = cached(db, batched=True)  # ours reads them, computes and writes 30 more
    second = caching.loglikelihood(requests(70))
    caching.dbdict.close()
    again, caching = cached(db, batched=False)  # plain lm-eval reads all 70
    third = caching.loglikelihood(requests(70))
    assert (plain.computed, ours.computed, again.computed) == (40, 30, 0)
    assert second[:40] == first and third == second
    assert answers_held(Path(db)) == 70


def commits(store: AnswerStore) -> list[str]:
    seen: list[str] = []
    store._con.set_trace_callback(lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None)
    return seen


def test_answers_wait_for_the_interval_or_a_commit_then_go_in_one_transaction(tmp_path):
    db = tmp_path / "c_rank0.db"
    store = AnswerStore(str(db), interval=3600)
    seen = commits(store)
    for i in range(1000):
        store[f"k{i}"] = (-1.0 * i, False)
    assert answers_held(db) == 0 and not seen  # nothing on file yet
    assert "k999" in store and store["k999"] == (-999.0, False) and "k1000" not in store  # but read back
    store.commit()
    assert answers_held(db) == 1000 and len(seen) == 1  # one transaction for all
    store.close()


def test_the_timer_writes_an_answer_that_no_later_write_follows(tmp_path):
    db = tmp_path / "c_rank0.db"
    store = AnswerStore(str(db), interval=0.2)
    store["only"] = "answer"
    deadline = time.monotonic() + 10
    while answers_held(db) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert answers_held(db) == 1
    store.close()


class SlowFile:
    """A store's connection whose transactions wait for ``go``: a slow disk, held still while the test looks."""

    def __init__(self, con: sqlite3.Connection):
        import threading

        self.con, self.go, self.writing = con, threading.Event(), threading.Event()

    def executemany(self, sql, rows):
        self.writing.set()
        assert self.go.wait(30), "the test never let the write go on"
        return self.con.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self.con, name)

    def __enter__(self):
        return self.con.__enter__()

    def __exit__(self, *exc):
        return self.con.__exit__(*exc)


def test_the_writer_thread_writes_while_the_run_goes_on(tmp_path):
    """A request type's answers (``harness._through``: ``update``, then ``flush_soon``) go to the file from the
    writer thread: the call returns before the transaction ends, answers keep coming and are read back meanwhile,
    and everything is on file once the writer is done."""
    import threading

    db = tmp_path / "c_rank0.db"
    store = AnswerStore(str(db), interval=3600)
    slow = store._con = SlowFile(store._con)
    store.update((f"k{i}", float(i)) for i in range(1000))
    store.flush_soon()  # returns at once: the writer thread takes the transaction
    assert slow.writing.wait(10), "the writer thread did not start the transaction"
    assert threading.current_thread() is threading.main_thread() and store._flusher != threading.get_ident()
    store["late"] = -1.0  # a new answer while the file is busy: kept in memory, nothing waits
    assert store["k999"] == 999.0 and store["late"] == -1.0 and "k1000" not in store  # both read back meanwhile
    assert answers_held(db) == 0
    slow.go.set()
    store.commit()  # waits for the writer's transaction, then writes what came during it
    assert answers_held(db) == 1001 and store["k0"] == 0.0
    store.close()


WRITER = textwrap.dedent(
    """
    import sys, time
    from belief_tasks.hooks.answer_store import AnswerStore
    store = AnswerStore(sys.argv[1], interval=3600)
    for i in range(300):
        store[f"kept{i}"] = float(i)
    store.commit()
    for i in range(200):
        store[f"pending{i}"] = float(i)
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("signum, held", [(signal.SIGTERM, 500), (signal.SIGKILL, 300)])
def test_sigterm_writes_what_is_pending_sigkill_loses_only_that(tmp_path, signum, held):
    db = tmp_path / "c_rank0.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        env=env_with_checkout(),
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signum)
    assert proc.wait(timeout=60) == -signum  # the signal still ends the process as it did
    assert answers_held(db) == held


def test_a_run_under_use_cache_writes_through_the_store(tmp_path):
    """lm-eval's ``simple_evaluate`` with ``use_cache``: our evaluate hook puts the store in place, for ``CachingLM``
    and for the hook the model got, and every request's answer is on file when the run ends."""
    from lm_eval.api.model import hash_args
    from lm_eval.models.dummy import DummyLM

    from harness import evaluate

    lm = DummyLM()
    prefix = tmp_path / "cache" / "run"
    out = evaluate(["belief_demo_bear"], "", model=lm, limit=2, use_cache=str(prefix), metadata={"source": "sample"})
    assert isinstance(lm.cache_hook.dbdict, AnswerStore)
    asked = {hash_args("loglikelihood", tuple(a)) for s in out["samples"]["belief_demo_bear"] for a in s["arguments"]}
    with sqlite3.connect(Path(f"{prefix}_rank0.db")) as con:
        kept = {k for (k,) in con.execute("SELECT key FROM unnamed")}
    assert len(asked) > 50 and kept == asked


class Generating(Counting):
    """A model that also generates: greedy requests and sampled ones (``do_sample``), as lm-eval hands them."""

    def generate_until(self, requests, disable_tqdm=False):
        self.computed += len(requests)
        return [f"answer to {r.args[0]}" for r in requests]


def test_each_request_is_hashed_once_and_a_sample_is_neither_read_nor_written(tmp_path, monkeypatch, caplog):
    """``harness.cached_call`` in place of ``CachingLM``'s request method: one key per request (lm-eval hashes
    each twice), the same reads and log line, and no row for a sample, which lm-eval never reads back."""
    import logging

    from lm_eval.api.model import hash_args

    hashed: list[str] = []
    monkeypatch.setattr(harness, "hash_args", lambda t, a: hashed.append(a[0]) or hash_args(t, a))
    greedy = [Req(f"Q{i}", {"until": ["\n"], "do_sample": False}) for i in range(6)]
    sampled = [Req(f"Q{i}", {"until": ["\n"], "do_sample": True, "temperature": 1.0}) for i in range(4)]
    db = str(tmp_path / "c_rank0.db")
    lm, caching = cached(db, batched=True)
    lm.__class__ = Generating
    first = caching.generate_until(greedy[:3] + sampled)
    assert lm.computed == 7 and sorted(hashed) == ["Q0", "Q1", "Q2"]
    hashed.clear()
    with caplog.at_level(logging.INFO, logger="lm_eval.api.model"):
        second = caching.generate_until(greedy + sampled)
    assert lm.computed == 7 + 3 + 4  # the three greedy answers kept are read; every sample is computed again
    assert second[:3] == first[:3] and sorted(hashed) == sorted(f"Q{i}" for i in range(6))
    assert "Cached requests: 3, Requests remaining: 7" in caplog.text  # lm-eval's count: a sample is remaining
    caching.dbdict.close()
    assert answers_held(Path(db)) == 6
