"""`python -m app db ...`: the label store's schema, migrated by hand.

    python -m app db upgrade [--data-dir DIR | --database-url URL]   migrate to this release's schema
    python -m app db current [--data-dir DIR | --database-url URL]   the database's schema and this release's

A server alone on its SQLite file migrates at start. A fleet's replica (a PostgreSQL --database-url, or
--fleet) never does: other replicas may still run the previous release on the same tables, and several
replicas starting at once would all try. It refuses an older schema in one line naming `db upgrade`, which
an operator runs once per release (compose's `migrate` service, the Kubernetes `migrate` Job). Processes
that create or migrate the schema at once take turns (a PostgreSQL advisory lock; SQLite's write lock).
"""

from __future__ import annotations

import argparse
import os
import sys

from app.config import DATABASE_URL_ENV
from app.team.users_cli import _store_flags
from labelstore import StoreError, default_url
from labelstore.engine import engine_for, migrate, revisions


def _run(command: str, engine) -> str:
    before, head = revisions(engine)
    if command == "current":
        return f"schema {before or 'empty'}; this release's {head}" + (
            "" if before == head else ": run `python -m app db upgrade`")
    migrate(engine, upgrade=True)
    return f"schema {head}" + (" (already)" if before == head else f" (was {before or 'empty'})")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser("python -m app db", description="The label store's schema (alembic migrations).")
    _store_flags(p, lambda v: v)
    p.add_argument("command", choices=("upgrade", "current"))
    a = p.parse_args(argv)
    url = a.database_url or os.environ.get(DATABASE_URL_ENV) or default_url(a.data_dir)
    try:
        engine = engine_for(url)
        try:
            print(_run(a.command, engine))
        finally:
            engine.dispose()
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
