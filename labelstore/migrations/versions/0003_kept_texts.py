"""The review queue and the live audit's sample in the store (table kept_texts), no longer files.

Revision ID: 0003_kept_texts
Revises: 0002_queue_open
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003_kept_texts'
down_revision = '0002_queue_open'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('kept_texts',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=20), nullable=False),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('item', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_kept_texts')),
    sa.UniqueConstraint('kind', 'key', name='uq_kept_texts_kind_key')
    )
    with op.batch_alter_table('kept_texts', schema=None) as batch_op:
        batch_op.create_index('ix_kept_texts_kind', ['kind', 'id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('kept_texts', schema=None) as batch_op:
        batch_op.drop_index('ix_kept_texts_kind')
    op.drop_table('kept_texts')
