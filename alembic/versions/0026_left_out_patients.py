"""left_out_patients: the patients a release leaves out

The per-patient filter no longer refuses a release: it leaves out the blocks of patients that
cannot afford it, recorded on the release's ledger entry at admission (null: everybody is
read). Existing entries read every patient of their dataset: null. A search's entry records
the probability that it ran fewer runs than it drew (``tail_probability``), which the filters
take out of their delta. No existing row changes.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 05:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0026'
down_revision: str | None = '0025'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('ledger_entry', sa.Column('left_out', sa.JSON(), nullable=True))
    op.add_column('ledger_entry', sa.Column('tail_probability', sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column('ledger_entry', 'tail_probability')
    op.drop_column('ledger_entry', 'left_out')
