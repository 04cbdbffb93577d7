"""job: DP-SGD columns are null for a job that is not DP-SGD

A monitoring run or a comparison is one Gaussian release (its noise multiplier, on its ledger
entry's event), not DP-SGD: its job row held a made-up sample rate 1, one step, one epoch and
clip norm 1. Those columns become nullable and such rows hold null. The downgrade writes the
old placeholders back. No ledger record changes.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-02 16:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0031'
down_revision: str | None = '0030'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# column -> (its type, the placeholder a one-release job held before)
COLUMNS = {
    'sample_rate': (sa.Float(), 1.0),
    'steps': (sa.Integer(), 1),
    'epochs': (sa.Integer(), 1),
    'max_grad_norm': (sa.Float(), 1.0),
}
ONE_RELEASE_KINDS = ('monitoring', 'comparison')


def _set_nullable(nullable: bool) -> None:
    """Alter the plan's columns; SQLite rebuilds ``job``, which rows of other tables refer
    to, so its foreign keys are off for the rebuild and checked before it commits."""
    sqlite = op.get_bind().dialect.name == 'sqlite'
    context = op.get_context()
    if sqlite:
        with context.autocommit_block():  # a no-op inside a transaction: run it outside one
            op.execute("PRAGMA foreign_keys=OFF")
    with op.batch_alter_table('job', schema=None) as batch_op:
        for name, (kind, _) in COLUMNS.items():
            batch_op.alter_column(name, existing_type=kind, nullable=nullable)
    if not sqlite:
        return
    dangling = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if dangling:  # raised before the commit below: the rebuild is rolled back
        raise RuntimeError(f"rebuilding job broke foreign keys: {dangling}")
    with context.autocommit_block():  # commits the rebuild, then enforces foreign keys again
        op.execute("PRAGMA foreign_keys=ON")


def upgrade() -> None:
    _set_nullable(True)
    job = sa.table('job', sa.column('kind'), *(sa.column(name) for name in COLUMNS))
    op.execute(job.update().where(job.c.kind.in_(ONE_RELEASE_KINDS))
               .values({name: None for name in COLUMNS}))


def downgrade() -> None:
    job = sa.table('job', *(sa.column(name) for name in COLUMNS))
    for name, (_, placeholder) in COLUMNS.items():
        op.execute(job.update().where(job.c[name].is_(None)).values({name: placeholder}))
    _set_nullable(False)
