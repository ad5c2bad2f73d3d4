"""The first schema: users, datasets, records, the label event log, answers, queue slots, adjudications.

Revision ID: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    _people_and_texts()
    _answers_and_queue()


def _people_and_texts() -> None:
    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('role', sa.String(length=20), nullable=False),
    sa.Column('token_hash', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('revoked_at', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name')),
    sa.UniqueConstraint('token_hash', name=op.f('uq_users_token_hash'))
    )
    op.create_table('datasets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('labels', sa.JSON(), nullable=False),
    sa.Column('multi_label', sa.Boolean(), nullable=False),
    sa.Column('overlap', sa.Integer(), nullable=False),
    sa.Column('created_by', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['created_by'], ['users.id'], name=op.f('fk_datasets_created_by_users')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_datasets'))
    )
    op.create_table('records',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('text_hash', sa.String(length=64), nullable=False),
    sa.Column('meta', sa.JSON(), nullable=True),
    sa.Column('suggestion', sa.JSON(), nullable=True),
    sa.Column('model_version', sa.String(length=100), nullable=True),
    sa.Column('priority', sa.Float(), nullable=False),
    sa.Column('n_answers', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], name=op.f('fk_records_dataset_id_datasets'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_records')),
    sa.UniqueConstraint('dataset_id', 'text_hash', name='uq_records_dataset_text')
    )
    with op.batch_alter_table('records', schema=None) as batch_op:
        batch_op.create_index('ix_records_queue', ['dataset_id', 'n_answers', 'priority', 'id'], unique=False)


def _answers_and_queue() -> None:
    op.create_table('label_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('record_id', sa.Integer(), nullable=False),
    sa.Column('annotator_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=20), nullable=False),
    sa.Column('value', sa.JSON(), nullable=True),
    sa.Column('suggestion', sa.JSON(), nullable=True),
    sa.Column('model_version', sa.String(length=100), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('client_event_id', sa.String(length=100), nullable=True),
    sa.ForeignKeyConstraint(['annotator_id'], ['users.id'], name=op.f('fk_label_events_annotator_id_users')),
    sa.ForeignKeyConstraint(['record_id'], ['records.id'], name=op.f('fk_label_events_record_id_records'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_label_events')),
    sa.UniqueConstraint('annotator_id', 'client_event_id', name='uq_label_events_client')
    )
    with op.batch_alter_table('label_events', schema=None) as batch_op:
        batch_op.create_index('ix_label_events_record', ['record_id'], unique=False)

    op.create_table('slots',
    sa.Column('record_id', sa.Integer(), nullable=False),
    sa.Column('slot', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('annotator_id', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=10), nullable=False),
    sa.Column('expires_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['annotator_id'], ['users.id'], name=op.f('fk_slots_annotator_id_users')),
    sa.ForeignKeyConstraint(['record_id'], ['records.id'], name=op.f('fk_slots_record_id_records'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('record_id', 'slot', name=op.f('pk_slots')),
    sa.UniqueConstraint('record_id', 'annotator_id', name='uq_slots_record_annotator')
    )
    with op.batch_alter_table('slots', schema=None) as batch_op:
        batch_op.create_index('ix_slots_annotator', ['annotator_id', 'state'], unique=False)

    op.create_table('adjudications',
    sa.Column('record_id', sa.Integer(), nullable=False),
    sa.Column('value', sa.JSON(), nullable=False),
    sa.Column('reviewer_id', sa.Integer(), nullable=False),
    sa.Column('event_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['event_id'], ['label_events.id'], name=op.f('fk_adjudications_event_id_label_events')),
    sa.ForeignKeyConstraint(['record_id'], ['records.id'], name=op.f('fk_adjudications_record_id_records'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['reviewer_id'], ['users.id'], name=op.f('fk_adjudications_reviewer_id_users')),
    sa.PrimaryKeyConstraint('record_id', name=op.f('pk_adjudications'))
    )
    op.create_table('answers',
    sa.Column('record_id', sa.Integer(), nullable=False),
    sa.Column('annotator_id', sa.Integer(), nullable=False),
    sa.Column('value', sa.JSON(), nullable=False),
    sa.Column('event_id', sa.Integer(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['annotator_id'], ['users.id'], name=op.f('fk_answers_annotator_id_users')),
    sa.ForeignKeyConstraint(['event_id'], ['label_events.id'], name=op.f('fk_answers_event_id_label_events')),
    sa.ForeignKeyConstraint(['record_id'], ['records.id'], name=op.f('fk_answers_record_id_records'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('record_id', 'annotator_id', name=op.f('pk_answers'))
    )


def downgrade() -> None:
    op.drop_table('answers')
    op.drop_table('adjudications')
    with op.batch_alter_table('slots', schema=None) as batch_op:
        batch_op.drop_index('ix_slots_annotator')

    op.drop_table('slots')
    with op.batch_alter_table('label_events', schema=None) as batch_op:
        batch_op.drop_index('ix_label_events_record')

    op.drop_table('label_events')
    with op.batch_alter_table('records', schema=None) as batch_op:
        batch_op.drop_index('ix_records_queue')

    op.drop_table('records')
    op.drop_table('datasets')
    op.drop_table('users')
