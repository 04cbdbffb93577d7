"""patient spaces: the chain covers the blocks (a "blocks" record per change of them)

``patient_space_event.blocks``: a "blocks" record's change (the dataset, the blocks closed, the
blocks opened with their datasets and sizes; ``app.ledger.space_chain``); null on budget
records, whose hashes do not cover it. The blocks that exist now (migration 0019's one block
per dataset, the uploads since) were written without a record: each space with live blocks
gets one "blocks" record here that opens them all, the baseline the chain replays from.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 10:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.core.time import utcnow
from app.ledger.hashing import record_hash
from app.ledger.space_chain import block_change, content

revision: str = '0021'
down_revision: str | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

space_t = sa.table(
    'patient_space',
    sa.column('id', sa.Integer()), sa.column('budget_epsilon', sa.Float()),
    sa.column('budget_delta', sa.Float()), sa.column('filter_order', sa.Float()),
    sa.column('chain_head_seq', sa.Integer()), sa.column('chain_head_hash', sa.String()),
)
block_t = sa.table(
    'patient_block',
    sa.column('id', sa.Integer()), sa.column('space_id', sa.Integer()),
    sa.column('datasets', sa.JSON()), sa.column('size', sa.Integer()),
    sa.column('closed_at', sa.DateTime(timezone=True)),
)
event_t = sa.table(
    'patient_space_event',
    *(sa.column(name, sa.Integer()) for name in ('id', 'space_id', 'seq')),
    *(sa.column(name, sa.Float()) for name in ('budget_epsilon', 'budget_delta', 'filter_order')),
    sa.column('kind', sa.String()), sa.column('created_at', sa.DateTime(timezone=True)),
    sa.column('prev_hash', sa.String()), sa.column('hash', sa.String()),
    sa.column('blocks', sa.JSON()),
)


def upgrade() -> None:
    op.add_column('patient_space_event', sa.Column('blocks', sa.JSON(), nullable=True))
    _baselines()


def _baselines() -> None:
    """Each space with live blocks: one record opening them, after its chain's head."""
    bind = op.get_bind()
    now = utcnow()
    spaces = bind.execute(sa.select(space_t.c.id, space_t.c.budget_epsilon,
                                    space_t.c.budget_delta, space_t.c.filter_order,
                                    space_t.c.chain_head_seq, space_t.c.chain_head_hash)
                          .order_by(space_t.c.id)).all()
    for space_id, epsilon, delta, order, head_seq, head_hash in spaces:
        live = bind.execute(sa.select(block_t.c.id, block_t.c.datasets, block_t.c.size)
                            .where(block_t.c.space_id == space_id, block_t.c.closed_at.is_(None),
                                   block_t.c.size > 0).order_by(block_t.c.id)).all()
        if not live:
            continue
        blocks = block_change(dataset_id=None, closed=[],
                              opened=[(b, list(datasets), size) for b, datasets, size in live])
        seq = head_seq + 1
        digest = record_hash(content(space_id=space_id, seq=seq, kind='blocks', created_at=now,
                                     epsilon=epsilon, delta=delta, order=order, blocks=blocks),
                             head_hash)
        bind.execute(sa.insert(event_t).values(
            space_id=space_id, seq=seq, kind='blocks', budget_epsilon=epsilon,
            budget_delta=delta, filter_order=order, created_at=now, prev_hash=head_hash,
            hash=digest, blocks=blocks))
        bind.execute(sa.update(space_t).where(space_t.c.id == space_id)
                     .values(chain_head_seq=seq, chain_head_hash=digest))


def downgrade() -> None:
    """Drop the block records and move each space's head back to its last budget record (a
    budget record written after a block record still links to it: that chain no longer
    verifies, as a downgrade loses what the dropped records said)."""
    bind = op.get_bind()
    bind.execute(sa.delete(event_t).where(event_t.c.kind == 'blocks'))
    last = (sa.select(event_t.c.seq, event_t.c.hash, event_t.c.space_id)
            .order_by(event_t.c.space_id, event_t.c.seq))
    heads = {space: (seq, digest) for seq, digest, space in bind.execute(last)}
    bind.execute(sa.update(space_t).values(chain_head_seq=0, chain_head_hash='0' * 64))
    for space_id, (seq, digest) in heads.items():
        bind.execute(sa.update(space_t).where(space_t.c.id == space_id)
                     .values(chain_head_seq=seq, chain_head_hash=digest))
    op.execute('ALTER TABLE patient_space_event DROP COLUMN blocks')
