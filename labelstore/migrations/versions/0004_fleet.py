"""The fleet: model registry metadata and active pointer, leases, replicas, promotions (labelstore/fleet_schema.py).

Revision ID: fleet1
Revises: 0003_kept_texts
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = 'fleet1'
down_revision = '0003_kept_texts'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('model_versions',
    sa.Column('name', sa.String(length=20), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('folder', sa.String(length=200), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('deleted_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_model_versions')),
    sa.UniqueConstraint('number', name=op.f('uq_model_versions_number'))
    )
    op.create_table('registry_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('time', sa.Float(), nullable=False),
    sa.Column('event', sa.String(length=40), nullable=False),
    sa.Column('version', sa.String(length=20), nullable=True),
    sa.Column('fields', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_registry_events'))
    )
    op.create_table('registry_pointer',
    sa.Column('id', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('version', sa.String(length=20), nullable=True),
    sa.Column('generation', sa.Integer(), nullable=False),
    sa.Column('changed_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_registry_pointer'))
    )
    op.create_table('leases',
    sa.Column('name', sa.String(length=40), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=200), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('acquired_at', sa.Float(), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_leases'))
    )
    op.create_table('replicas',
    sa.Column('id', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=200), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('heartbeat_at', sa.Float(), nullable=False),
    sa.Column('serving', sa.String(length=20), nullable=True),
    sa.Column('promotion_id', sa.Integer(), nullable=True),
    sa.Column('prepare_state', sa.String(length=10), nullable=True),
    sa.Column('parity', sa.String(length=64), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('evicted_at', sa.Float(), nullable=True),
    sa.Column('monitor', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_replicas'))
    )
    op.create_table('promotions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version', sa.String(length=20), nullable=False),
    sa.Column('previous', sa.String(length=20), nullable=True),
    sa.Column('state', sa.String(length=12), nullable=False),
    sa.Column('why', sa.Text(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('deadline', sa.Float(), nullable=False),
    sa.Column('finished_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_promotions'))
    )


def downgrade() -> None:
    for table in ('promotions', 'replicas', 'leases', 'registry_pointer', 'registry_events', 'model_versions'):
        op.drop_table(table)
