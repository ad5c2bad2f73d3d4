"""Open the label store: the engine (SQLite tuned for many writers, or PostgreSQL), then migrations.

SQLite is opened in WAL mode with synchronous=NORMAL (a commit is one WAL append, durable across a process
crash; a power cut may lose the last ones), a busy timeout and foreign keys on. Writes begin with BEGIN
IMMEDIATE: a deferred transaction that reads first and then writes cannot wait for the lock (SQLite answers
"database is locked" at once to avoid a deadlock), so every write takes the lock up front and waits its turn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event

from labelstore.schema_check import lacking

MIGRATIONS = Path(__file__).parent / "migrations"
BUSY_TIMEOUT_MS = 30_000  # a command (users add, db upgrade) may wait out another writer
# A server's: past it a write answers 503 with Retry-After (labelstore/tx.py Busy), so a process holding the write
# lock (the sqlite3 shell, a backup, VACUUM) makes the store's requests wait at most this, never hang them all.
SERVER_BUSY_TIMEOUT_MS = 2_000


class StoreError(ValueError):
    """The database cannot be used (unreachable, newer schema): one line for the user, never a password."""


def default_url(data_dir) -> str:
    return f"sqlite:///{Path(data_dir).resolve() / 'app.db'}"


def where(url: sa.URL) -> str:
    """The database named for a message: host and port, or the SQLite file. Never the password."""
    if url.get_backend_name() == "sqlite":
        return url.database or ":memory:"
    return f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"


def make_engine(url: str, pool_size: int = 10, busy_ms: int = BUSY_TIMEOUT_MS) -> sa.Engine:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _private_file(Path(parsed.database))
        engine = sa.create_engine(parsed, pool_size=pool_size, max_overflow=pool_size,
                                  connect_args={"timeout": busy_ms / 1000, "check_same_thread": False})
        _tune_sqlite(engine, busy_ms)
        return engine
    return sa.create_engine(parsed, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)


def _private_file(path: Path) -> None:
    """The database file made 0600 before SQLite makes it (under umask 022: 0644): its -wal and -shm get the
    database's mode from SQLite, so they are 0600 too; a folder made here is 0700. The store holds every text,
    answer, user name and token hash. An existing file keeps the mode its owner gave it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _tune_sqlite(engine: sa.Engine, busy_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def on_connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None  # transactions are begun below, not by the driver
        cur = dbapi_connection.cursor()
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        _wal(cur)
        for pragma in ("synchronous=NORMAL", "foreign_keys=ON"):
            cur.execute(f"PRAGMA {pragma}")
        cur.close()

    @event.listens_for(engine, "begin")
    def on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")


def _wal(cur) -> None:
    """WAL, waiting for the lock its switch needs. Switching a file out of the rollback journal while another
    connection holds its write lock answers "database is locked" at once: SQLite skips the busy handler where
    waiting could deadlock (several processes opening a new store together). WAL is kept in the file, so only
    a new store's first opens meet it."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _alembic(connection) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


UPGRADE_COMMAND = "python -m app db upgrade"
_LOCK_KEY = 43_0004  # pg_advisory_xact_lock: processes creating or migrating the schema at once take turns


@contextlib.contextmanager
def _quiet_alembic():
    """Alembic's info lines (its plugins, "Context impl ...") for a check that changes nothing: a replica
    refused for its schema says one line, not a dozen. An upgrade still logs what it runs."""
    logger = logging.getLogger("alembic")
    level = logger.level
    logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(level)


def revisions(engine: sa.Engine) -> tuple[str | None, str]:
    """(the database's schema revision, None when it has no tables yet; this code's head). StoreError when
    it cannot be reached or a newer release migrated it (this code does not know its tables)."""
    url = engine.url
    with _quiet_alembic():
        script = ScriptDirectory.from_config(_alembic(None))
        head = script.get_current_head()
    try:
        with engine.connect() as conn, _quiet_alembic():
            current = MigrationContext.configure(conn).get_current_revision()
            missing = lacking(conn) if current == head else None  # at head: its tables must be there
    except sa.exc.OperationalError as e:
        raise StoreError(f"cannot connect to the database at {where(url)}: {_reason(e, url)}") from None
    except sa.exc.DatabaseError as e:  # not a database, or damaged ("file is not a database", "malformed")
        raise StoreError(unreadable(e, url)) from None
    if current is not None and current not in {rev.revision for rev in script.walk_revisions()}:
        raise StoreError(f"the database at {where(url)} has schema {current}, newer than this app knows "
                         f"(head {head}): upgrade the app, or give another --database-url")
    if missing:
        raise StoreError(f"the database at {where(url)} has schema {current} but {missing}: it was changed "
                         f"outside the app; restore it from a backup, or give another --database-url")
    return current, head


def unreadable(error: Exception, url: sa.URL) -> str:
    """One line for a database that answers but cannot be read: what to do, never a traceback."""
    return (f"the database at {where(url)} cannot be read ({_reason(error, url)}): it is damaged or not this "
            f"app's database; restore it from a backup, or move it away (a new empty one is made at the next "
            f"start or by `{UPGRADE_COMMAND}`)")


def migrate(engine: sa.Engine, upgrade: bool = True) -> str:
    """Bring the schema to this code's head; returns the revision. An empty database gets its tables either
    way. With upgrade=False (a fleet's replica: others may run this release's predecessor on the same tables)
    an older schema is refused in one line naming the command that migrates it."""
    current, head = revisions(engine)
    if current == head:
        return head
    with engine.execution_options(write=True).begin() as conn:  # SQLite: BEGIN IMMEDIATE, one writer at a time
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
        with _quiet_alembic():  # another process may have been first
            current = MigrationContext.configure(conn).get_current_revision()
        if current is not None and current != head and not upgrade:
            raise StoreError(f"the database at {where(engine.url)} has schema {current}, older than this app's "
                             f"{head}, and a fleet's replica never migrates it: run `{UPGRADE_COMMAND}` with the "
                             f"same --database-url once, then start the replicas")
        if current != head:
            try:
                command.upgrade(_alembic(conn), "head")
            except sa.exc.DatabaseError as e:  # a table a migration alters was dropped or is damaged
                raise StoreError(f"the database at {where(engine.url)} cannot be migrated from schema {current} "
                                 f"({_reason(e, engine.url)}): it was changed outside the app or is damaged; "
                                 "restore it from a backup") from None
    return head


def _reason(error: Exception, url: sa.URL) -> str:
    line = str(getattr(error, "orig", error)).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return line.replace(url.password, "***") if url.password else line


def engine_for(url: str, busy_ms: int = BUSY_TIMEOUT_MS) -> sa.Engine:
    """The engine, not yet connected; StoreError (one line) for a URL it cannot use."""
    try:
        return make_engine(url, busy_ms=busy_ms)
    except (sa.exc.ArgumentError, ImportError) as e:
        raise StoreError(f"--database-url: {e}") from None


def open_store(url: str, upgrade: bool = True, busy_ms: int = BUSY_TIMEOUT_MS) -> sa.Engine:
    """The engine, its schema migrated to this code's head (upgrade=False: created when empty, an older one
    refused; see `migrate`). StoreError (one line) when it cannot be used. `busy_ms`: how long a write waits
    for another process's lock on SQLite (a server's: SERVER_BUSY_TIMEOUT_MS)."""
    engine = engine_for(url, busy_ms)
    migrate(engine, upgrade)
    return engine
