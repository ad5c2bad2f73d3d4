"""The label store: datasets, records, the append-only label event log, answers, queue leases, adjudications
and users, in SQLite (the default) or PostgreSQL, through SQLAlchemy with alembic migrations.

app/ uses it; serving/ and finetune/ never do (a training child gets a snapshot table).
"""

from labelstore.engine import StoreError, default_url, open_store

__all__ = ["StoreError", "default_url", "open_store"]
