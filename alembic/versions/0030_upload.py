"""upload: an upload's spooled body, ingested by a worker

``PUT /v1/datasets/{id}/data`` spools the body and answers 202 with the upload's resource
(``GET /v1/uploads/{id}``); a worker validates and keeps it (``app.flows.upload``). No
existing row changes.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-02 11:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0030'
down_revision: str | None = '0029'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'upload',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('dataset_id', sa.Integer(), nullable=False),
        sa.Column('state', sa.String(16), nullable=False),
        sa.Column('claim', sa.String(64), nullable=False),
        sa.Column('spool_path', sa.String(1024), nullable=False),
        sa.Column('sha256', sa.String(64), nullable=False),
        sa.Column('media_type', sa.String(200), nullable=False),
        sa.Column('size_bytes', sa.Integer(), nullable=False),
        sa.Column('sent_by', sa.JSON(), nullable=False),
        sa.Column('problem', sa.JSON(), nullable=True),
        sa.Column('worker_id', sa.String(200), nullable=True),
        sa.Column('lease_until', sa.DateTime(timezone=True), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'],
                                name=op.f('fk_upload_dataset_id_dataset')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_upload')),
    )
    op.create_index(op.f('ix_upload_dataset_id'), 'upload', ['dataset_id'])
    op.create_index(op.f('ix_upload_state'), 'upload', ['state'])


def downgrade() -> None:
    op.drop_index(op.f('ix_upload_state'), table_name='upload')
    op.drop_index(op.f('ix_upload_dataset_id'), table_name='upload')
    op.drop_table('upload')
