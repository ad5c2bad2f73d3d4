"""The queue's hot statements on SQLite through the driver's cursor, compiled once by SQLAlchemy.

A label save is two transactions of about a dozen small statements. SQLAlchemy's execute costs ~45 us a
statement here (its cache key, parameter and result set-up) against ~3 us for sqlite3's own cursor, measured
on these 2 cores: most of the store's share of a save. So each statement is compiled by SQLAlchemy once per
set of parameter names, and run with SQLAlchemy's own bind and result processors (JSON in and out exactly as
SQLAlchemy stores it) on the connection's sqlite3 cursor, inside the transaction tx.run began. Driver errors
come back as SQLAlchemy's (IntegrityError...), which is what tx.run and the queue catch. Any other database
takes SQLAlchemy's ordinary path.
"""

from __future__ import annotations

import collections
import sqlite3

import sqlalchemy as sa

_ERRORS = ((sqlite3.IntegrityError, sa.exc.IntegrityError), (sqlite3.OperationalError, sa.exc.OperationalError),
           (sqlite3.Error, sa.exc.DBAPIError))


def driver(dbapi_connection, sql: str) -> None:
    """One statement without parameters on the driver (BEGIN, COMMIT), its errors as SQLAlchemy's."""
    try:
        dbapi_connection.execute(sql)
    except sqlite3.Error as e:
        raise next(ours for theirs, ours in _ERRORS if isinstance(e, theirs))(sql, (), e) from None


class _Compiled:
    __slots__ = ("binders", "compiled", "constants", "names", "readers", "row", "sql")

    def __init__(self, stmt, dialect, keys):
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys))
        self.sql, self.compiled, self.names = str(compiled), compiled, compiled.positiontup
        procs = compiled._bind_processors
        self.binders = [procs.get(n) for n in self.names]
        # The statement's own values (a literal such as state == "leased"), taken once rather than by
        # construct_params at every call (1-4 us a statement, a third to two thirds of its Python here). Only
        # where every other name is one the caller gives; else (a name SQLAlchemy renamed) construct_params.
        binds = compiled.binds
        other = [n for n in self.names if n not in keys]
        plain = all(n in keys or not (binds[n].required or binds[n].callable) for n in self.names)
        self.constants = {n: binds[n].effective_value for n in other} if plain else None
        columns = list(stmt.exported_columns)
        self.row = collections.namedtuple("Row", [c.key for c in columns]) if columns else None
        self.readers = [c.type._cached_result_processor(dialect, None) for c in columns]

    def args(self, params: dict) -> list:
        if self.constants is None:
            values = self.compiled.construct_params(params)  # with the statement's own literals and defaults
        else:
            values = params if not self.constants else {**self.constants, **params}
        return [values[n] if b is None else b(values[n]) for n, b in zip(self.names, self.binders)]


class Result:
    __slots__ = ("rowcount", "rows")

    def __init__(self, rows, rowcount):
        self.rows, self.rowcount = rows, rowcount

    def first(self):
        return self.rows[0] if self.rows else None

    def all(self):
        return self.rows

    def scalar_one(self):
        if len(self.rows) != 1:
            raise sa.exc.NoResultFound("expected one row") if not self.rows else sa.exc.MultipleResultsFound()
        return self.rows[0][0]


class Statement:
    """A statement built once (module level); `execute(conn, params)` runs it."""

    def __init__(self, stmt):
        self.stmt = stmt
        self._compiled: dict[tuple, _Compiled] = {}

    def execute(self, conn: sa.Connection, params: dict):
        if conn.dialect.name != "sqlite":
            return conn.execute(self.stmt, params)
        keys = tuple(sorted(params))
        c = self._compiled.get(keys)
        if c is None:
            c = self._compiled.setdefault(keys, _Compiled(self.stmt, conn.dialect, keys))
        args = c.args(params)
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(c.sql, args)
            rows = cursor.fetchall() if c.row is not None else []
            rowcount = cursor.rowcount
        except sqlite3.Error as e:
            raise next(ours for theirs, ours in _ERRORS if isinstance(e, theirs))(c.sql, args, e) from None
        finally:
            cursor.close()
        if c.row is not None:
            make, readers = c.row._make, c.readers
            rows = [make(v if r is None else r(v) for v, r in zip(raw, readers)) for raw in rows]
        return Result(rows, rowcount)
