"""unlabelled follow-ups: dataset.labelled

A follow-up cohort may be sent without its outcome column (features only): monitoring runs then
measure its data drift alone, and nothing trains or evaluates on it. Every dataset stored
before this revision carried its outcome, so the column is true for all of them.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26 20:20:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0023'
down_revision: str | None = '0022'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('labelled', sa.Boolean(), nullable=False,
                                       server_default=sa.true()))


def downgrade() -> None:
    # An unlabelled follow-up's table has no outcome column: the older code would read it as
    # labelled and refuse its rows. Refuse the downgrade while one is stored, rather than
    # leave it behind mislabelled.
    bind = op.get_bind()
    found = bind.execute(sa.text(
        "SELECT id FROM dataset WHERE labelled = :no AND state NOT IN ('erased', 'withdrawn')"
    ), {"no": False}).scalars().all()
    if found:
        raise RuntimeError(f"datasets {sorted(found)} are unlabelled follow-ups whose rows "
                           "revision 0022 cannot read: erase their rows first")
    op.drop_column('dataset', 'labelled')
