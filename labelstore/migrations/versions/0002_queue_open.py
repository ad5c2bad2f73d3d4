"""The queue reads open texts in order from an index: records.is_open (fewer than k answers).

Before, `next` found open texts with n_answers < k, a range: SQLite read every open text of the dataset,
ran the slot checks on each and sorted them all, at each `next` (0.5 ms for 2,000 texts, growing with the
dataset). With is_open in the index, the texts come in queue order and the read stops after a few.

Revision ID: 0002_queue_open
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002_queue_open'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('records', schema=None) as batch_op:
        batch_op.add_column(sa.Column('is_open', sa.Boolean(), nullable=False, server_default=sa.true()))
    op.execute("UPDATE records SET is_open = (n_answers < (SELECT overlap FROM datasets "
               "WHERE datasets.id = records.dataset_id))")
    with op.batch_alter_table('records', schema=None) as batch_op:
        batch_op.drop_index('ix_records_queue')
        batch_op.create_index('ix_records_open', ['dataset_id', 'is_open', 'priority', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('records', schema=None) as batch_op:
        batch_op.drop_index('ix_records_open')
        batch_op.create_index('ix_records_queue', ['dataset_id', 'n_answers', 'priority', 'id'], unique=False)
        batch_op.drop_column('is_open')
