"""idempotency keys for POST /v1/jobs and POST /v1/datasets

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 12:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('idempotency_key',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('route', sa.String(length=64), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('body_sha256', sa.String(length=64), nullable=False),
    sa.Column('resource_id', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_idempotency_key')),
    sa.UniqueConstraint('route', 'key', name=op.f('uq_idempotency_key_route'))
    )


def downgrade() -> None:
    op.drop_table('idempotency_key')
