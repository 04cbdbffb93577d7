"""Each dataset names the keyed function of its records' coins

``dataset.coin_scheme``: ``blake2b-v1`` for every dataset registered so far (their parts stay
exactly as they were: a record's part is the keyed BLAKE2b of its id), ``aes-v2`` for every
dataset registered from now on (``app.datasets.record_coins``: AES-256 over the id's block, one
vectorised call for a whole table instead of one hash call per record).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24 05:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild: other tables' foreign keys point at dataset). The
    # server default fills the existing rows; new registrations always set the column.
    op.add_column('dataset', sa.Column('coin_scheme', sa.String(16), nullable=False,
                                       server_default='blake2b-v1'))


def downgrade() -> None:
    op.drop_column('dataset', 'coin_scheme')
