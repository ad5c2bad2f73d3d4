"""Alembic's entry: run with the connection labelstore/engine.py opened (never a URL from a file)."""

from __future__ import annotations

from alembic import context

from labelstore import fleet_schema  # noqa: F401 - its tables join the metadata
from labelstore.schema import metadata

connection = context.config.attributes["connection"]
# render_as_batch: SQLite cannot ALTER most things; batch mode copies the table, PostgreSQL alters in place
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
