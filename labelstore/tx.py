"""Transactions with retries: the one way the store writes.

A write that loses a race (two clients claiming the last slot of a text, a retried request arriving twice
at once, a PostgreSQL deadlock) fails on a constraint, rolls back whole, and runs again from the start: the
second run sees what the winner committed and answers from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref

import sqlalchemy as sa

_log = logging.getLogger("app")
RETRIES = 8
_PG_RETRY = {"40P01", "40001"}  # deadlock detected, serialization failure


def _retryable(error: sa.exc.DBAPIError) -> bool:
    if isinstance(error, sa.exc.IntegrityError):
        return True
    return getattr(getattr(error, "orig", None), "sqlstate", None) in _PG_RETRY


# SQLite takes one writer at a time. Writers of one process queue on a lock here rather than in SQLite's busy
# handler, which polls with sleeps growing to 100 ms: measured with 16 threads, p99 of an answer 1,187 ms
# without this lock (p50 1.9 ms). The busy timeout still covers other processes on the same file.
_WRITERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _writer_lock(engine: sa.Engine):
    if engine.dialect.name != "sqlite":
        return contextlib.nullcontext()
    lock = _WRITERS.get(engine)
    if lock is None:
        lock = _WRITERS.setdefault(engine, threading.Lock())
    return lock


def run(engine: sa.Engine, fn, write: bool = True):
    """fn(connection) inside one transaction (BEGIN IMMEDIATE on SQLite when `write`), retried on a lost race."""
    for attempt in range(RETRIES):
        try:
            with (_writer_lock(engine) if write else contextlib.nullcontext()), \
                    engine.connect().execution_options(write=write) as conn, conn.begin():
                return fn(conn)
        except sa.exc.DBAPIError as e:
            if not _retryable(e) or attempt == RETRIES - 1:
                raise
            time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


def read(engine: sa.Engine, fn):
    return run(engine, fn, write=False)


# An async server's store calls, on SQLite: all in one thread per engine, in arrival order. SQLite writes one
# transaction at a time anyway; one thread spares the hand-off of the lock between many pool threads and
# their fight for the GIL with the event loop (server CPU per label save, bench/team_labels.py: see
# docs/results.md). PostgreSQL writes in parallel: its calls go to the default thread pool.
_THREADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _thread_of(engine: sa.Engine):
    from concurrent.futures import ThreadPoolExecutor

    pool = _THREADS.get(engine)
    if pool is None:
        pool = _THREADS.setdefault(engine, ThreadPoolExecutor(1, thread_name_prefix="labelstore"))
    return pool


async def call(engine: sa.Engine, fn, *args):
    """fn(*args), a function of the store (labelstore/queue.py...), off the event loop."""
    if engine.dialect.name != "sqlite":
        return await asyncio.to_thread(fn, *args)
    return await asyncio.get_running_loop().run_in_executor(_thread_of(engine), fn, *args)


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
