"""The tables (SQLAlchemy 2 Core). Migrations in labelstore/migrations create them; this module is the one
description both the migrations and the queries read, so a column has one name everywhere.

Times are seconds since the epoch (a float): the same type on SQLite and PostgreSQL, no time-zone drift.
Label values are JSON: a string for a single-label dataset, a sorted list of strings for a multi-label one.
"""

from __future__ import annotations

import sqlalchemy as sa

metadata = sa.MetaData(naming_convention={
    "ix": "ix_%(column_0_label)s", "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s", "pk": "pk_%(table_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s"})

ROLES = ("annotator", "reviewer", "admin")

users = sa.Table(
    "users", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), nullable=False, unique=True),
    sa.Column("role", sa.String(20), nullable=False),
    # sha256 of a 256-bit random token (labelstore/users.py says why not argon2); NULL for the built-in
    # identities ("local" in one-person mode, "api-key" for --api-key), which no token can name.
    sa.Column("token_hash", sa.String(64), unique=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("revoked_at", sa.Float),
)

datasets = sa.Table(
    "datasets", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("labels", sa.JSON, nullable=False),
    sa.Column("multi_label", sa.Boolean, nullable=False),
    sa.Column("overlap", sa.Integer, nullable=False),
    sa.Column("created_by", sa.Integer, sa.ForeignKey("users.id")),
    sa.Column("created_at", sa.Float, nullable=False),
)

records = sa.Table(
    "records", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("dataset_id", sa.Integer, sa.ForeignKey("datasets.id", ondelete="CASCADE"), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("text_hash", sa.String(64), nullable=False),
    sa.Column("meta", sa.JSON),
    # What the model said when the dataset was made: shown to annotators, and the queue's order (least sure first)
    sa.Column("suggestion", sa.JSON),
    sa.Column("model_version", sa.String(100)),
    sa.Column("priority", sa.Float, nullable=False, default=0.0),
    sa.Column("n_answers", sa.Integer, nullable=False, default=0),
    # n_answers < the dataset's overlap: kept beside the count so the queue reads open texts in order
    # from the index and stops after a few (migration 0002_queue_open)
    sa.Column("is_open", sa.Boolean, nullable=False, default=True, server_default=sa.true()),
    sa.UniqueConstraint("dataset_id", "text_hash", name="uq_records_dataset_text"),
    sa.Index("ix_records_open", "dataset_id", "is_open", "priority", "id"),
)

# Append-only: rows are inserted, never updated or deleted. An answer, a changed answer, an undo and an
# adjudication are each an event; `answers` and `adjudications` hold the current state they lead to.
label_events = sa.Table(
    "label_events", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), nullable=False),
    sa.Column("annotator_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("status", sa.String(20), nullable=False),  # answered, changed, undone, adjudicated
    sa.Column("value", sa.JSON),
    sa.Column("suggestion", sa.JSON),
    sa.Column("model_version", sa.String(100)),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("client_event_id", sa.String(100)),
    # per annotator: one person's retry is recognised, another person's id can never collide with it
    sa.UniqueConstraint("annotator_id", "client_event_id", name="uq_label_events_client"),
    sa.Index("ix_label_events_record", "record_id"),
)

answers = sa.Table(
    "answers", metadata,
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("annotator_id", sa.Integer, sa.ForeignKey("users.id"), primary_key=True),
    sa.Column("value", sa.JSON, nullable=False),
    sa.Column("event_id", sa.Integer, sa.ForeignKey("label_events.id"), nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)

# The queue: a record has `overlap` slots, numbered 0..k-1; the primary key makes a (k+1)-th impossible, so
# no race can put more than k people on a text. A slot is leased (until expires_at) or answered.
slots = sa.Table(
    "slots", metadata,
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("slot", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("annotator_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("state", sa.String(10), nullable=False),  # leased, answered
    sa.Column("expires_at", sa.Float, nullable=False),
    sa.UniqueConstraint("record_id", "annotator_id", name="uq_slots_record_annotator"),
    sa.Index("ix_slots_annotator", "annotator_id", "state"),
)

adjudications = sa.Table(
    "adjudications", metadata,
    sa.Column("record_id", sa.Integer, sa.ForeignKey("records.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("value", sa.JSON, nullable=False),
    sa.Column("reviewer_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
    sa.Column("event_id", sa.Integer, sa.ForeignKey("label_events.id"), nullable=False),
    sa.Column("created_at", sa.Float, nullable=False),
)

# Texts the server keeps from what clients sent, for a person to label: the review queue ("review": the
# API's "not sure" answers) and the live audit ("audit": the sample waiting; "audit_seen": hashes of texts
# sampled lately, not sampled again). app/labeling/kept_store.py keeps them; before, files under the data folder.
kept_texts = sa.Table(
    "kept_texts", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("key", sa.String(64), nullable=False),  # the text's key within its kind (a hash, or the text)
    sa.Column("item", sa.JSON),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.UniqueConstraint("kind", "key", name="uq_kept_texts_kind_key"),
    sa.Index("ix_kept_texts_kind", "kind", "id"),
)
