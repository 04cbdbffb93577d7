"""dataset.upload_claim_owner: the process that holds an upload's claim

A claim names its owner (``host pid boot``) so that a start gives back at once the claims of
processes on its host that are gone, instead of waiting for their lease. Existing claims stay
null (only their lease ends them).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-02 18:10:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0033'
down_revision: str | None = '0032'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('upload_claim_owner', sa.String(length=300),
                                       nullable=True))


def downgrade() -> None:
    op.drop_column('dataset', 'upload_claim_owner')
