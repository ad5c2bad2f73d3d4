"""Transactions with retries: the one way the store writes.

A write that loses a race (two clients claiming the last slot of a text, a retried request arriving twice
at once, a PostgreSQL deadlock) fails on a constraint, rolls back whole, and runs again from the start: the
second run sees what the winner committed and answers from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref

import sqlalchemy as sa

from labelstore import fast

_log = logging.getLogger("app")
RETRIES = 8
_PG_RETRY = {"40P01", "40001"}  # deadlock detected, serialization failure


class Busy(Exception):
    """SQLite's write lock is held by another process (the sqlite3 shell, a backup, VACUUM) past the engine's busy
    timeout: the request answers 503 with Retry-After, nothing of it written."""

    retry_after = 2  # seconds

    def __init__(self):
        super().__init__("the label store is locked by another process (a backup, VACUUM, the sqlite3 shell); "
                         "nothing was saved: retry")


def _locked(error: sa.exc.DBAPIError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock the statement needs."""
    return getattr(getattr(error, "orig", None), "sqlite_errorcode", None) in (5, 6) or \
        "database is locked" in str(error)


# After a Busy the store thread answers Busy at once for this long, rather than making every queued save wait out
# the busy timeout in turn (a lock held 15 s would queue them behind each other); the event loop still tries each
# save first without waiting, so the first one after the lock is gone succeeds.
_BUSY_FOR_S = 1.0
_BUSY_UNTIL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _retryable(error: sa.exc.DBAPIError) -> bool:
    if isinstance(error, sa.exc.IntegrityError):
        return True
    return getattr(getattr(error, "orig", None), "sqlstate", None) in _PG_RETRY


# SQLite takes one writer at a time. Writers queue on a lock here rather than in SQLite's busy handler, which
# polls with sleeps growing to 100 ms: measured with 16 threads, p99 of an answer 1,187 ms without this lock
# (p50 1.9 ms). Threads of one process queue on a threading.Lock; processes sharing the file (a fleet's
# replicas; bench/team_labels.py --servers until issue 60, git history) on an flock of the file beside it,
# which the kernel hands to the next waiter at once and releases with a killed process. The busy timeout still
# covers other writers (the users command).
_WRITERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _FileLock:
    def __init__(self, path: str):
        import fcntl

        self._flock, self._thread = fcntl.flock, threading.Lock()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._ex, self._un, self._nb = fcntl.LOCK_EX, fcntl.LOCK_UN, fcntl.LOCK_NB

    def acquire(self, blocking: bool = True) -> bool:
        if not self._thread.acquire(blocking):
            return False
        try:
            self._flock(self._fd, self._ex if blocking else self._ex | self._nb)
        except BlockingIOError:
            self._thread.release()
            return False
        except BaseException:
            self._thread.release()
            raise
        return True

    def release(self) -> None:
        self._flock(self._fd, self._un)
        self._thread.release()

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc):
        self.release()

    def __del__(self):
        os.close(self._fd)


def _new_lock(engine: sa.Engine):
    path = engine.url.database
    if not path or path == ":memory:" or path.startswith("file:") or os.name != "posix":
        return threading.Lock()
    return _FileLock(path + "-writer.lock")


def _writer_lock(engine: sa.Engine):
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    lock = _WRITERS.get(engine)
    if lock is None:
        lock = _WRITERS.setdefault(engine, _new_lock(engine))
    return lock


def run(engine: sa.Engine, fn, write: bool = True):
    """fn(connection) inside one transaction (BEGIN IMMEDIATE on SQLite when `write`), retried on a lost race."""
    for attempt in range(RETRIES):
        try:
            with (_writer_lock(engine) if write else contextlib.nullcontext()), \
                    engine.connect().execution_options(write=write) as conn, conn.begin():
                return fn(conn)
        except sa.exc.DBAPIError as e:
            if _locked(e):
                raise Busy from None
            if not _retryable(e) or attempt == RETRIES - 1:
                raise
            time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


def read(engine: sa.Engine, fn):
    return run(engine, fn, write=False)


_LOCAL = threading.local()  # `hot`: the connection a thread keeps (the store's, the event loop's); `inline`
CHECKPOINT_EVERY = 500  # commits on the event loop's connection between two checkpoints in the store thread


class _Busy(Exception):
    """The writer lock is taken (or a race was lost): what call_hot tried on the event loop goes to the
    store thread instead, which may wait."""


class _Kept:
    """The store thread's own sqlite3 connection, opened once through the engine (its connect-time pragmas)
    and detached from the pool, read by labelstore/fast.py as it reads a Connection (`dialect`,
    `connection.dbapi_connection`)."""

    def __init__(self, engine: sa.Engine, checkpoints: bool = True):
        fairy = engine.raw_connection()
        # a weak reference: the thread must not keep a disposed engine (and with it this thread) alive
        self.engine, self.dialect, self.dbapi_connection = weakref.ref(engine), engine.dialect, fairy.dbapi_connection
        fairy.detach()  # this thread's for good: the pool neither counts it nor resets it on return
        self.connection, self.commits = self, 0
        if not checkpoints:  # the event loop's: a checkpoint's fsync must not hold every request
            self.dbapi_connection.execute("PRAGMA wal_autocheckpoint=0")
            # nor another process's write lock: the loop never waits in SQLite's busy handler (call_hot hands
            # the save to the store thread, which may wait)
            self.dbapi_connection.execute("PRAGMA busy_timeout=0")


def _checkpoint(engine: sa.Engine) -> None:
    """A passive checkpoint (writers go on meanwhile), in the store thread, for the event loop's commits."""
    kept = _LOCAL.hot
    if kept is None or kept.engine() is not engine:
        kept = _LOCAL.hot = _Kept(engine)
    kept.dbapi_connection.execute("PRAGMA wal_checkpoint(PASSIVE)")


def run_hot(engine: sa.Engine, fn):
    """`run` for the queue's hot path (fn runs only labelstore/fast.py statements). In the store thread on
    SQLite: BEGIN IMMEDIATE ... COMMIT on a connection that thread keeps, without the pool checkout, the
    events and SQLAlchemy's execute that `run` spends on every transaction; elsewhere, `run`."""
    kept = getattr(_LOCAL, "hot", False)
    if kept is False or engine.dialect.name != "sqlite":
        return run(engine, fn)
    inline = getattr(_LOCAL, "inline", False)
    if kept is None or kept.engine() is not engine:
        kept = _LOCAL.hot = _Kept(engine, checkpoints=not inline)
    db, lock = kept.dbapi_connection, _writer_lock(engine)
    if not inline and time.monotonic() < _BUSY_UNTIL.get(engine, 0.0):
        raise Busy
    for attempt in range(RETRIES):
        if not lock.acquire(not inline):
            raise _Busy
        try:
            fast.driver(db, "BEGIN IMMEDIATE")
            try:
                out = fn(kept)
                fast.driver(db, "COMMIT")
            finally:
                if db.in_transaction:  # fn or the commit failed: nothing of it stays
                    db.rollback()
            kept.commits += 1
            if inline and kept.commits % CHECKPOINT_EVERY == 0:
                later(engine, _checkpoint, engine)
            return out
        except sa.exc.DBAPIError as e:
            if inline:  # a lost race or another process's lock: the retry may wait, in the store thread
                raise _Busy from None
            if _locked(e):
                _BUSY_UNTIL[engine] = time.monotonic() + _BUSY_FOR_S
                raise Busy from None
            if not _retryable(e) or attempt == RETRIES - 1:
                raise
        finally:
            lock.release()
        time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


# An async server's store calls, on SQLite: all in one thread per engine, in arrival order. SQLite writes one
# transaction at a time anyway; one thread spares the hand-off of the lock between many pool threads and
# their fight for the GIL with the event loop (server CPU per label save, bench/team_labels.py: see
# docs/notes/log.md, "Team labeling"). PostgreSQL writes in parallel: its calls go to the default thread pool.
_THREADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _thread_of(engine: sa.Engine):
    from concurrent.futures import ThreadPoolExecutor

    pool = _THREADS.get(engine)
    if pool is None:
        pool = _THREADS.setdefault(engine, ThreadPoolExecutor(1, thread_name_prefix="labelstore",
                                                              initializer=_store_thread))
    return pool


def _store_thread() -> None:
    _LOCAL.hot = None  # run_hot keeps a connection here, opened at its first transaction


async def call(engine: sa.Engine, fn, *args):
    """fn(*args), a function of the store (labelstore/queue.py...), off the event loop."""
    if engine.dialect.name != "sqlite":
        return await asyncio.to_thread(fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_thread_of(engine), fn, *args)


async def call_hot(engine: sa.Engine, fn, *args):
    """`call` for a function whose store work is one run_hot (the queue's next and submit). On SQLite it runs
    at once on the event loop's thread when the writer lock is free: no hand-off to the store thread and
    back, no fight for the GIL between the two (measured: docs/notes/log.md, "Team labeling"); a transaction
    here is a few hundred microseconds, and its checkpoints are left to the store thread. Where the lock is
    taken (another thread or process writes) or a race is lost, in the store thread, which may wait."""
    if engine.dialect.name == "sqlite":
        if getattr(_LOCAL, "hot", False) is False:
            _LOCAL.hot = None
        _LOCAL.inline = True
        try:
            return fn(*args)
        except _Busy:
            pass
        finally:
            _LOCAL.inline = False
    return await call(engine, fn, *args)


def later(engine: sa.Engine, fn, *args):
    """fn(*args) in the store's thread, after what was handed to it before; the caller does not wait (a
    failure is logged). For writes that must not hold a request: the texts the server keeps."""
    def logged():
        try:
            return fn(*args)
        except Exception:
            _log.exception("label store: a background write failed")
            raise

    return _thread_of(engine).submit(logged)
