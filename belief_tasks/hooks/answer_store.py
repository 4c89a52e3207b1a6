"""lm-eval's ``--use_cache`` file, written in batches: one transaction a second, not one per answer.

lm-eval's ``CachingLM`` opens its cache as ``SqliteDict(path, autocommit=True)``: every look-up and every write is
a round trip to sqlitedict's own thread, and every write is a transaction of its own (a journal file made and
removed). On a fast model that costs more than the model (docs/scale.md, "What it costs"). ``AnswerStore`` takes
its place for a run (``hooks.harness.batch_cache_writes``, from the evaluate hook): the same file, table, keys and
pickled values (sqlitedict's ``encode``/``decode``), so plain lm-eval reads what it writes and it reads what
plain lm-eval wrote; look-ups go straight to sqlite; writes wait in memory and go to the file in one transaction
once ``INTERVAL`` seconds have passed since the oldest of them came (written by a timer thread, so that the run does
not wait for the file: sqlite works without the GIL), whenever lm-eval or our ``read_through`` commits (the end of
each request type's call; in the caller's thread), at exit and on SIGTERM. A SIGKILL (or a power cut: sqlite runs
with ``synchronous=OFF``, as sqlitedict sets it) loses the answers of the last ``INTERVAL`` seconds at most, and
those of a transaction it cuts.
"""

from __future__ import annotations

import atexit
import math
import os
import signal
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

#: seconds between two transactions at most (what a SIGKILL can lose)
INTERVAL = 1.0
#: lm-eval's table (sqlitedict's default name)
TABLE = "unnamed"

_MISSING = object()
_open: weakref.WeakSet[AnswerStore] = weakref.WeakSet()
_timer: threading.Thread | None = None
_setup = threading.Lock()
_wake = threading.Event()  # set by a write that finds its store due: the timer thread writes it now


class AnswerStore:
    """A ``--use_cache`` file as lm-eval's code uses its ``SqliteDict``: ``key in store``, ``store[key]``,
    ``store[key] = value``, ``commit()``, ``close()`` (module docstring)."""

    def __init__(self, filename: str, interval: float = INTERVAL) -> None:
        from sqlitedict import decode, encode

        self.filename, self.interval = filename, interval
        self._encode, self._decode = encode, decode
        self._lock = threading.RLock()  # the answers in memory (``_pending``, ``_writing``)
        self._write_lock = threading.RLock()  # one transaction at a time on the connection
        self._pending: dict[str, Any] = {}
        self._writing: dict[str, Any] = {}  # the answers of the transaction under way, readable until it ends
        self._since: float | None = None  # when the oldest pending answer came
        self._flusher: int | None = None  # the thread inside ``flush`` (a signal may interrupt it)
        self._deliver: int | None = None  # a signal ``_on_signal`` deferred (``_deliver_deferred``)
        self._pid = os.getpid()  # a forked child inherits the store, and writes nothing of it
        self._con: sqlite3.Connection | None = sqlite3.connect(filename, check_same_thread=False, timeout=60)
        self._con.execute("PRAGMA synchronous=OFF")  # as sqlitedict: a killed process loses nothing committed
        self._con.execute(f'CREATE TABLE IF NOT EXISTS "{TABLE}" (key TEXT PRIMARY KEY, value BLOB)')
        self._con.commit()
        # a table empty at the start, that nothing was written to since, holds no key: no look-up needed
        self._may_hold = self._con.execute(f'SELECT max(rowid) FROM "{TABLE}"').fetchone()[0] is not None
        _watch(self)

    def __contains__(self, key: str) -> bool:
        return self._blob(key) is not _MISSING

    def get(self, key: str, default: Any = None) -> Any:
        """The answer under ``key``, or ``default``: one look-up (``key in`` then ``[key]`` is two)."""
        blob = self._blob(key)
        return default if blob is _MISSING else self._decode(blob)

    def _blob(self, key: str) -> Any:
        """The stored (pickled) answer under ``key``: waiting, being written or on file; else ``_MISSING``."""
        with self._lock:
            blob = self._pending.get(key, self._writing.get(key, _MISSING))
            may_hold = self._may_hold
        self._deliver_deferred()
        if blob is _MISSING and may_hold:
            row = self._select(key)
            blob = _MISSING if row is None else row[0]
        return blob

    def __getitem__(self, key: str) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        self.update(((key, value),))

    def update(self, items: Iterable[tuple[str, Any]]) -> None:
        """Keep several answers (``(key, answer)`` pairs) at once: one lock and one clock read for all of them."""
        blobs = [(key, self._encode(value)) for key, value in items]
        with self._lock:
            self._pending.update(blobs)
            if self._since is None and self._pending:
                self._since = time.monotonic()
        self._deliver_deferred()
        if self.due():
            _wake.set()  # the timer thread writes them

    def _select(self, key: str):
        assert self._con is not None, f"{self.filename}: the answer store is closed"
        return self._con.execute(f'SELECT value FROM "{TABLE}" WHERE key = ?', (key,)).fetchone()

    def flush(self) -> None:
        """Write the pending answers in one transaction; they stay pending if it fails. New answers may come while
        it writes (``update`` waits only for ``_lock``, which the transaction does not hold)."""
        with self._write_lock:
            self._flusher = threading.get_ident()
            try:
                self._write_pending()
            finally:
                self._flusher = None
        self._deliver_deferred()

    def _write_pending(self) -> None:
        with self._lock:
            if not self._pending or self._con is None or os.getpid() != self._pid:
                return
            self._writing, self._pending, self._since = self._pending, {}, None
        written = False
        try:
            with self._con:  # one transaction: committed, or rolled back on an error
                # in key order: the key index's pages are visited once each, not at random (27% less time)
                self._con.executemany(
                    f'REPLACE INTO "{TABLE}" (key, value) VALUES (?, ?)', sorted(self._writing.items())
                )
            written = True
        finally:
            with self._lock:
                if written:
                    self._may_hold = True
                else:  # back to pending, behind any newer answer under the same key
                    self._pending = {**self._writing, **self._pending}
                    self._since = self._since or time.monotonic()
                self._writing = {}

    commit = flush  # lm-eval's CachingLM commits after each call, and waits for it

    def flush_soon(self) -> None:
        """Have the timer thread write the pending answers now, without waiting for it (``harness._through`` at the
        end of a request type: the run goes on to its next step while the file is written)."""
        with self._lock:
            if self._pending:
                self._since = -math.inf  # due at once
        self._deliver_deferred()
        _wake.set()

    def _deliver_deferred(self) -> None:
        """A SIGTERM that ``_on_signal`` deferred (it came during a flush of the main thread, or while the main thread
        held ``_lock``, when a flush could wait for the writer thread's transaction, which waits for that lock):
        handled now that the flush is over and the lock is free. Only in the main thread, where Python runs signal
        handlers: the writer thread leaves it there."""
        if (
            self._deliver is None
            or self._flusher == threading.get_ident()
            or threading.current_thread() is not threading.main_thread()
        ):
            return
        deliver, self._deliver = self._deliver, None
        _finish(deliver)

    def due(self) -> bool:
        since = self._since
        return since is not None and time.monotonic() - since >= self.interval

    def close(self) -> None:
        with self._write_lock:
            self.flush()
            if self._con is not None:
                self._con.close()
                self._con = None
        _open.discard(self)


def flush_all() -> None:
    """Write every open store's pending answers (at exit, on a signal, before the default cache is counted)."""
    for store in list(_open):
        store.flush()


def _watch(store: AnswerStore) -> None:
    """Register ``store`` with the exit flush, the signal handler and the timer thread (each set up once)."""
    global _timer
    with _setup:
        _open.add(store)
        if _timer is not None:
            return
        atexit.register(flush_all)
        _handle(signal.SIGTERM)
        _timer = threading.Thread(target=_tick, name="answer-store-flush", daemon=True)
        _timer.start()


def _tick() -> None:
    """The timer: a store whose oldest pending answer waited its interval is written, whether writes come or not."""
    while True:
        _wake.wait(min([INTERVAL, *(s.interval for s in list(_open))]) / 4)
        _wake.clear()
        for store in list(_open):
            if store.due():
                try:
                    store.flush()
                except sqlite3.Error:
                    pass  # left pending: the next write, commit or exit tries again, and raises there


_previous: dict[int, Any] = {}


def _handle(signum: int) -> None:
    """On ``signum``, write the pending answers, then let the signal do what it did before (default: end the
    process). Only from the main thread (Python's rule), and not for a signal the process ignores."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signum)
    if previous in (signal.SIG_IGN, None):
        return
    _previous[signum] = previous
    signal.signal(signum, _on_signal)


def _on_signal(signum: int, frame) -> None:
    for store in list(_open):
        # the signal interrupted this thread's flush, or it holds the answers' lock (a flush now could wait for the
        # writer thread, which waits for that lock): handled once the flush ends or the lock is released
        if store._flusher == threading.get_ident() or store._lock._is_owned():  # type: ignore[attr-defined]
            store._deliver = signum
            return
    _finish(signum, frame)


def _finish(signum: int, frame=None) -> None:
    """Every store written, then the signal's previous handling."""
    flush_all()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signum, previous)
    os.kill(os.getpid(), signum)
