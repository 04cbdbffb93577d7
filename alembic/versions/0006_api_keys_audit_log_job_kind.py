"""API keys with roles, the audit log, and job kinds on the one queue

``api_key`` holds only SHA-256 hashes of keys. ``audit_event`` records who did what (never
patient features). ``job.kind`` lets privacy-audit jobs share the training queue; every
existing job is a training job.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 14:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_key',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('role', sa.String(length=32), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('key_sha256', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint("role IN ('admin', 'data_scientist', 'privacy_officer', 'clinician')",
                       name=op.f('ck_api_key_role')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_key')),
    sa.UniqueConstraint('key_sha256', name=op.f('uq_api_key_key_sha256')),
    sa.UniqueConstraint('name', name=op.f('uq_api_key_name'))
    )
    op.create_table('audit_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('api_key_id', sa.Integer(), nullable=True),
    sa.Column('actor', sa.String(length=100), nullable=False),
    sa.Column('role', sa.String(length=32), nullable=True),
    sa.Column('action', sa.String(length=64), nullable=False),
    sa.Column('target', sa.String(length=200), nullable=True),
    sa.Column('detail', sa.JSON(), nullable=False),
    sa.Column('request_id', sa.String(length=64), nullable=True),
    sa.ForeignKeyConstraint(['api_key_id'], ['api_key.id'],
                            name=op.f('fk_audit_event_api_key_id_api_key')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_event'))
    )
    op.create_index(op.f('ix_audit_event_action'), 'audit_event', ['action'], unique=False)
    op.create_index(op.f('ix_audit_event_at'), 'audit_event', ['at'], unique=False)
    # A plain ADD COLUMN (no batch copy of ``job``: SQLite would drop a table that the
    # ledger's foreign keys point at).
    op.add_column('job', sa.Column('kind', sa.String(length=16), server_default='train',
                                   nullable=False))


def downgrade() -> None:
    op.drop_column('job', 'kind')
    op.drop_index(op.f('ix_audit_event_at'), table_name='audit_event')
    op.drop_index(op.f('ix_audit_event_action'), table_name='audit_event')
    op.drop_table('audit_event')
    op.drop_table('api_key')
