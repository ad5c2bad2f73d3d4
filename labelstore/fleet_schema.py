"""The fleet's tables: the model registry's metadata and active pointer, the trainer's lease, the replicas and
their promotions (app/fleet/replica.py). On the label store's `metadata`, so one alembic history covers both.

Model artifacts stay on disk, immutable folders named `vN-<first 12 hex of their sha256>`; these rows say
which versions exist, what they are (version.json's content) and which one serves. The pointer is one row:
a promotion's commit updates it (and its `generation`) in the same transaction as the promotion's state.
"""

from __future__ import annotations

import sqlalchemy as sa

from labelstore.schema import metadata

model_versions = sa.Table(
    "model_versions", metadata,
    sa.Column("name", sa.String(20), primary_key=True),  # v1, v2, ...: never reused, also after a delete
    sa.Column("number", sa.Integer, nullable=False, unique=True),
    sa.Column("folder", sa.String(200), nullable=False),  # vN-<sha12>, under the models directory
    sa.Column("sha256", sa.String(64), nullable=False),  # of every file in the folder (app/registry.folder_sha256)
    sa.Column("meta", sa.JSON, nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("deleted_at", sa.Float),
)

registry_events = sa.Table(
    "registry_events", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("event", sa.String(40), nullable=False),
    sa.Column("version", sa.String(20)),
    sa.Column("fields", sa.JSON, nullable=False),
)

# One row (id 1). `generation` grows at every flip: a replica that saw generation g knows it missed nothing.
registry_pointer = sa.Table(
    "registry_pointer", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.String(20)),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("changed_at", sa.Float, nullable=False),
)

# One row per lease name ("trainer"): held while expires_at is in the future; the holder renews it.
leases = sa.Table(
    "leases", metadata,
    sa.Column("name", sa.String(40), primary_key=True),
    sa.Column("holder", sa.String(200), nullable=False),
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("acquired_at", sa.Float, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False),
)

replicas = sa.Table(
    "replicas", metadata,
    sa.Column("id", sa.String(200), primary_key=True),  # --replica-id, default host:port
    sa.Column("host", sa.String(200), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("heartbeat_at", sa.Float, nullable=False),
    sa.Column("serving", sa.String(20)),
    # its answer to the promotion it last prepared: loading, ready, failed (reason says why)
    sa.Column("promotion_id", sa.Integer),
    sa.Column("prepare_state", sa.String(10)),
    sa.Column("parity", sa.String(64)),  # digest of the parity batch's labels: every replica must agree
    sa.Column("reason", sa.Text),
    sa.Column("evicted_at", sa.Float),  # a commit went on without it; it must load the active version to serve
    sa.Column("monitor", sa.JSON),  # its monitor's counts (app/monitoring/monitor.py snapshot), written with the heartbeat
)

promotions = sa.Table(
    "promotions", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("version", sa.String(20), nullable=False),
    sa.Column("previous", sa.String(20)),
    sa.Column("state", sa.String(12), nullable=False),  # preparing, committed, aborted
    sa.Column("why", sa.Text, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("deadline", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float),
)
