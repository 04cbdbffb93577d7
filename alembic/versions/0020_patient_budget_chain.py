"""patient spaces: a hash-chained record of every per-patient budget; an upload's overlap

``patient_space_event``: append-only, one record per budget a patient space had, each with
``hash = sha256(canonical content + prev_hash)`` chained per space (``app.ledger.space_chain``);
``patient_space.chain_head_seq`` / ``chain_head_hash``: the chain's head. Every existing space
gets its first record here: the budget it has now.

``dataset.patient_overlap``: an upload's patients against the organisation's earlier tables
(``app.datasets.patients.patient_index.Overlap``), and ``dataset.rows_equal_dataset_id``: the earlier
dataset whose rows its rows equal (no longer refused: its patients share their spend). Both are
exact intake facts, served to data stewards and admins only. Uploads accepted before this
revision have neither (their overlap is in their upload's audit event).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28 10:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.core.time import utcnow
from app.ledger.hashing import record_hash
from app.ledger.space_chain import content

revision: str = '0020'
down_revision: str | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENESIS = "0" * 64

space_t = sa.table(
    'patient_space',
    sa.column('id', sa.Integer()), sa.column('budget_epsilon', sa.Float()),
    sa.column('budget_delta', sa.Float()), sa.column('filter_order', sa.Float()),
    sa.column('chain_head_seq', sa.Integer()), sa.column('chain_head_hash', sa.String()),
)
event_t = sa.table(
    'patient_space_event',
    *(sa.column(name, sa.Integer()) for name in ('id', 'space_id', 'seq')),
    *(sa.column(name, sa.Float()) for name in ('budget_epsilon', 'budget_delta', 'filter_order')),
    sa.column('kind', sa.String()), sa.column('created_at', sa.DateTime(timezone=True)),
    sa.column('prev_hash', sa.String()), sa.column('hash', sa.String()),
)


def upgrade() -> None:
    op.add_column('patient_space', sa.Column('chain_head_seq', sa.Integer(),
                                             server_default='0', nullable=False))
    op.add_column('patient_space', sa.Column('chain_head_hash', sa.String(length=64),
                                             server_default=GENESIS, nullable=False))
    op.create_table(
        'patient_space_event',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('space_id', sa.Integer(), nullable=False),
        sa.Column('seq', sa.Integer(), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=False),
        sa.Column('budget_epsilon', sa.Float(), nullable=False),
        sa.Column('budget_delta', sa.Float(), nullable=False),
        sa.Column('filter_order', sa.Float(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('prev_hash', sa.String(length=64), nullable=False),
        sa.Column('hash', sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(['space_id'], ['patient_space.id'],
                                name=op.f('fk_patient_space_event_space_id_patient_space')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_patient_space_event')),
        sa.UniqueConstraint('space_id', 'seq', name=op.f('uq_patient_space_event_space_id')),
    )
    op.create_index(op.f('ix_patient_space_event_space_id'), 'patient_space_event',
                    ['space_id'])
    op.add_column('dataset', sa.Column('patient_overlap', sa.JSON(), nullable=True))
    op.add_column('dataset', sa.Column('rows_equal_dataset_id', sa.Integer(), nullable=True))
    _first_records()


def _first_records() -> None:
    """Each existing space's chain starts with the budget it has now."""
    bind = op.get_bind()
    now = utcnow()
    spaces = bind.execute(sa.select(space_t.c.id, space_t.c.budget_epsilon,
                                    space_t.c.budget_delta, space_t.c.filter_order)
                          .order_by(space_t.c.id)).all()
    for space_id, epsilon, delta, order in spaces:
        digest = record_hash(content(space_id=space_id, seq=1, kind='budget', created_at=now,
                                     epsilon=epsilon, delta=delta, order=order), GENESIS)
        bind.execute(sa.insert(event_t).values(
            space_id=space_id, seq=1, kind='budget', budget_epsilon=epsilon,
            budget_delta=delta, filter_order=order, created_at=now, prev_hash=GENESIS,
            hash=digest))
        bind.execute(sa.update(space_t).where(space_t.c.id == space_id)
                     .values(chain_head_seq=1, chain_head_hash=digest))


def downgrade() -> None:
    # Plain DROP COLUMN (SQLite >= 3.35 drops a plain column in place; no table copy that
    # would trip the foreign keys pointing at dataset).
    for column in ('rows_equal_dataset_id', 'patient_overlap'):
        op.execute(f'ALTER TABLE dataset DROP COLUMN {column}')
    op.drop_index(op.f('ix_patient_space_event_space_id'), table_name='patient_space_event')
    op.drop_table('patient_space_event')
    for column in ('chain_head_hash', 'chain_head_seq'):
        op.execute(f'ALTER TABLE patient_space DROP COLUMN {column}')
