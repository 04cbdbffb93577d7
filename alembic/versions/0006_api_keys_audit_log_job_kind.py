"""API keys with roles, the audit log, job kinds on the one queue, per-record split


``api_key`` holds only SHA-256 hashes of keys. ``audit_event`` records who did what (never
patient features). ``job.kind`` lets privacy-audit jobs share the training queue; every
existing job is a training job.

The training / held-out split becomes one independent coin per record (so the held-out
calibration composes in parallel with training): ``dataset.n_train`` is recounted for every
existing dataset. Past jobs keep their recorded sample rates (what they ran with); jobs still
queued run with their recorded rate over the new training rows, which keeps their accounting
exact (the Poisson rate is what is accounted, not the batch).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 14:00:00
"""
from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


dataset_t = sa.table(
    'dataset', *(sa.column(name, sa.Integer()) for name in ('id', 'n_rows', 'n_train', 'seed'))
)
TRAIN_FRACTION = 0.7


def _coin_train_count(n_rows: int, seed: int) -> int:
    """Frozen copy of app.datasets.synthetic.training_row_count as of this revision."""
    return int(np.count_nonzero(np.random.default_rng([seed, 2]).random(n_rows) < TRAIN_FRACTION))


def _permutation_train_count(n_rows: int) -> int:
    return int(round(TRAIN_FRACTION * n_rows))


def _recount(count) -> None:  # noqa: ANN001 - a function of (n_rows, seed)
    conn = op.get_bind()
    for row in conn.execute(sa.select(dataset_t.c.id, dataset_t.c.n_rows, dataset_t.c.seed)):
        conn.execute(sa.update(dataset_t).where(dataset_t.c.id == row.id)
                     .values(n_train=count(row.n_rows, row.seed)))


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
    _recount(_coin_train_count)


def downgrade() -> None:
    _recount(lambda n_rows, _seed: _permutation_train_count(n_rows))
    op.drop_column('job', 'kind')
    op.drop_index(op.f('ix_audit_event_at'), table_name='audit_event')
    op.drop_index(op.f('ix_audit_event_action'), table_name='audit_event')
    op.drop_table('audit_event')
    op.drop_table('api_key')
