"""A real PostgreSQL for the store tests: started once per session by initdb + pg_ctl on a temporary folder,
listening only on a Unix socket in that folder; each test gets a database of its own.

PostgreSQL refuses to run as root, and CI runs as root: there it runs as the `postgres` user (runuser), on
a folder that user owns. Where no PostgreSQL binary exists the PostgreSQL runs are skipped, saying why.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

_COUNTER = itertools.count()


def _binaries() -> Path | None:
    found = [shutil.which("pg_ctl"), "/usr/local/bin/pg_ctl", *sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))]
    for pg_ctl in found:
        if pg_ctl and Path(pg_ctl).exists() and (Path(pg_ctl).parent / "initdb").exists():
            return Path(pg_ctl).parent
    return None


@pytest.fixture(scope="session")
def postgres_server():
    """{"url": a SQLAlchemy URL template with {db}, "admin": the URL of the `postgres` database}."""
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("no PostgreSQL binary (pg_ctl, initdb) on PATH, in /usr/local/bin or /usr/lib/postgresql: "
                    "the PostgreSQL runs of the store tests are skipped")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no `postgres` user to run PostgreSQL as (it refuses root)")
    with running_postgres(bin_dir) as server:
        yield server


@contextlib.contextmanager
def running_postgres(bin_dir: Path | None = None, options: str = "-c fsync=off -c synchronous_commit=off"):
    """A PostgreSQL on a Unix socket in a temporary folder, stopped and removed after (also bench/fleet.py)."""
    bin_dir = bin_dir or _binaries()
    if bin_dir is None:
        raise RuntimeError("no PostgreSQL binary (pg_ctl, initdb) on PATH, in /usr/local/bin or /usr/lib/postgresql")
    prefix = []
    root = Path(tempfile.mkdtemp(prefix="pg-test-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    data, log = root / "data", root / "server.log"
    subprocess.run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8",
                    "--no-sync"], check=True, capture_output=True)
    options = f"-k {root} -c listen_addresses='' {options} -c max_connections=200"
    subprocess.run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"],
                   check=True, capture_output=True)
    try:
        yield {"url": f"postgresql+psycopg://postgres@/{{db}}?host={root}",
               "admin": f"postgresql+psycopg://postgres@/postgres?host={root}"}
    finally:
        subprocess.run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       check=False, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def new_database(server: dict) -> str:
    import sqlalchemy as sa

    name = f"t{os.getpid()}_{next(_COUNTER)}"
    engine = sa.create_engine(server["admin"], isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return server["url"].format(db=name)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """The same store test on SQLite (a file in tmp_path) and on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'app.db'}"
    return new_database(request.getfixturevalue("postgres_server"))
