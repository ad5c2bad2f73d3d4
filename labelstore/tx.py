"""Transactions with retries: the one way the store writes.

A write that loses a race (two clients claiming the last slot of a text, a retried request arriving twice
at once, a PostgreSQL deadlock) fails on a constraint, rolls back whole, and runs again from the start: the
second run sees what the winner committed and answers from it.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

RETRIES = 8
_PG_RETRY = {"40P01", "40001"}  # deadlock detected, serialization failure


def _retryable(error: sa.exc.DBAPIError) -> bool:
    if isinstance(error, sa.exc.IntegrityError):
        return True
    return getattr(getattr(error, "orig", None), "sqlstate", None) in _PG_RETRY


def run(engine: sa.Engine, fn, write: bool = True):
    """fn(connection) inside one transaction (BEGIN IMMEDIATE on SQLite when `write`), retried on a lost race."""
    for attempt in range(RETRIES):
        try:
            with engine.connect().execution_options(write=write) as conn, conn.begin():
                return fn(conn)
        except sa.exc.DBAPIError as e:
            if not _retryable(e) or attempt == RETRIES - 1:
                raise
            time.sleep(0.001 * (attempt + 1))
    raise AssertionError("unreachable")


def read(engine: sa.Engine, fn):
    return run(engine, fn, write=False)
