"""union datasets: dataset.union_of

A dataset may be a declared union of earlier cohorts of one schema (``source.kind`` "union"):
its rows are its members' rows, each patient once, and its releases charge every patient of
every member under the per-patient budget. The column lists the members in the order declared
(a patient in several keeps the row of the last); null for every other dataset, so every
dataset stored before this revision is unchanged.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-26 23:20:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0024'
down_revision: str | None = '0023'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('union_of', sa.JSON(), nullable=True))


def downgrade() -> None:
    # A union has no table of its own: the older code would look for one and fail on every
    # job. Refuse the downgrade while a union holds rows, rather than leave it unreadable.
    bind = op.get_bind()
    found = bind.execute(sa.text(
        "SELECT id FROM dataset WHERE source_kind = 'union' "
        "AND state NOT IN ('erased', 'withdrawn')")).scalars().all()
    if found:
        raise RuntimeError(f"datasets {sorted(found)} are unions of cohorts that revision "
                           "0023 cannot read: erase their rows first")
    op.drop_column('dataset', 'union_of')
