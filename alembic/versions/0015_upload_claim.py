"""An upload claims its dataset before its body arrives

``dataset.upload_claim`` (a random token) and ``dataset.upload_claimed_at``: set, with the state
``receiving``, in a short transaction of their own when an upload starts, so exactly one upload
per dataset proceeds and the others are refused at once (409); cleared when the upload ends
(``ready``, or back to ``awaiting_data`` on failure). A claim older than the longest time a body
may take is stale (its process died) and may be taken over. Null for every existing row.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 12:50:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0015'
down_revision: str | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN, nullable (no table rebuild: the dataset row is referenced everywhere).
    op.add_column('dataset', sa.Column('upload_claim', sa.String(64), nullable=True))
    op.add_column('dataset', sa.Column('upload_claimed_at', sa.DateTime(timezone=True),
                                       nullable=True))


def downgrade() -> None:
    op.drop_column('dataset', 'upload_claimed_at')
    op.drop_column('dataset', 'upload_claim')
