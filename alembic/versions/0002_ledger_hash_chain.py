"""ledger hash chain: append-only ledger_event, chain head on dataset

The ledger stops updating rows in place: an entry's status becomes its latest ``ledger_event``
(reserve / commit / release), each event hash-chained per dataset. Existing entries get their
events back-filled (reserve at created_at, then commit / release at updated_at, in time order
per dataset) before ``ledger_entry.status`` and ``updated_at`` are dropped.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 10:00:00
"""
from collections.abc import Sequence

from datetime import UTC

import sqlalchemy as sa
from alembic import op

from app.core.time import as_utc
from app.ledger.chain import event_content, record_hash

revision: str = '0002'
down_revision: str | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GENESIS = '0' * 64
KIND_OF_STATUS = {'committed': 'commit', 'released': 'release'}
STATUS_OF_KIND = {'reserve': 'reserved', 'commit': 'committed', 'release': 'released'}
KIND_ORDER = {'reserve': 0, 'commit': 1, 'release': 1}

dataset_t = sa.table(
    'dataset',
    sa.column('id', sa.Integer()),
    sa.column('ledger_head_seq', sa.Integer()),
    sa.column('ledger_head_hash', sa.String()),
)
entry_t = sa.table(
    'ledger_entry',
    *(sa.column(name, sa.Integer()) for name in ('id', 'dataset_id', 'job_id', 'steps')),
    *(sa.column(name, sa.String()) for name in ('mechanism', 'accountant', 'status')),
    *(sa.column(name, sa.Float()) for name in (
        'noise_multiplier', 'sample_rate', 'clip_norm', 'delta', 'epsilon_rdp', 'epsilon_prv',
    )),
    sa.column('created_at', sa.DateTime(timezone=True)),
    sa.column('updated_at', sa.DateTime(timezone=True)),
)
event_t = sa.table(
    'ledger_event',
    *(sa.column(name, sa.Integer()) for name in ('id', 'dataset_id', 'entry_id', 'seq')),
    *(sa.column(name, sa.String()) for name in ('kind', 'prev_hash', 'hash')),
    sa.column('created_at', sa.DateTime(timezone=True)),
)


def _history() -> dict[int, list[tuple]]:
    """Per dataset, what happened to its entries (from their status), read before the drop."""
    conn = op.get_bind()
    entries = conn.execute(sa.select(entry_t).order_by(entry_t.c.id)).all()
    by_dataset: dict[int, list[tuple]] = {}
    for entry in entries:
        steps = by_dataset.setdefault(entry.dataset_id, [])
        steps.append((entry.created_at, KIND_ORDER['reserve'], entry.id, 'reserve', entry))
        kind = KIND_OF_STATUS.get(entry.status)
        if kind is not None:
            steps.append((entry.updated_at, KIND_ORDER[kind], entry.id, kind, entry))
    return by_dataset


def _when(step: tuple) -> tuple:
    """Sort key: time (SQLite may hand back naive or aware values: both are UTC), kind, id."""
    return (as_utc(step[0]).astimezone(UTC), step[1], step[2])


def _backfill_events(by_dataset: dict[int, list[tuple]]) -> None:
    """One chain per dataset, in the order things happened."""
    conn = op.get_bind()
    for dataset_id, steps in by_dataset.items():
        prev_hash, seq = GENESIS, 0
        for created_at, _, entry_id, kind, entry in sorted(steps, key=_when):
            seq += 1
            content = event_content(
                dataset_id=dataset_id, entry_id=entry_id, seq=seq, kind=kind,
                created_at=created_at, entry=entry if kind == 'reserve' else None,
            )
            digest = record_hash(content, prev_hash)
            conn.execute(sa.insert(event_t).values(
                dataset_id=dataset_id, entry_id=entry_id, seq=seq, kind=kind,
                created_at=created_at, prev_hash=prev_hash, hash=digest,
            ))
            prev_hash = digest
        conn.execute(
            sa.update(dataset_t).where(dataset_t.c.id == dataset_id)
            .values(ledger_head_seq=seq, ledger_head_hash=prev_hash)
        )


def upgrade() -> None:
    # SQLite's batch mode copies and drops ledger_entry, which a referencing ledger_event would
    # block: read the history and drop the mutable columns first, then build the chain.
    history = _history()
    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.drop_column('updated_at')
        batch_op.drop_column('status')

    with op.batch_alter_table('dataset', schema=None) as batch_op:
        batch_op.add_column(
            sa.Column('ledger_head_seq', sa.Integer(), server_default='0', nullable=False)
        )
        batch_op.add_column(
            sa.Column('ledger_head_hash', sa.String(length=64), server_default=GENESIS,
                      nullable=False)
        )

    op.create_table('ledger_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('entry_id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('prev_hash', sa.String(length=64), nullable=False),
    sa.Column('hash', sa.String(length=64), nullable=False),
    sa.CheckConstraint("kind IN ('reserve', 'commit', 'release')",
                       name=op.f('ck_ledger_event_kind')),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'],
                            name=op.f('fk_ledger_event_dataset_id_dataset')),
    sa.ForeignKeyConstraint(['entry_id'], ['ledger_entry.id'],
                            name=op.f('fk_ledger_event_entry_id_ledger_entry')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ledger_event')),
    sa.UniqueConstraint('dataset_id', 'seq', name=op.f('uq_ledger_event_dataset_id'))
    )
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_ledger_event_entry_id'), ['entry_id'], unique=False)

    _backfill_events(history)


def downgrade() -> None:
    conn = op.get_bind()
    latest = {}
    for row in conn.execute(sa.select(event_t).order_by(event_t.c.dataset_id, event_t.c.seq)):
        latest[row.entry_id] = row
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ledger_event_entry_id'))
    op.drop_table('ledger_event')

    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status', sa.String(length=16), nullable=False,
                                      server_default='reserved'))
        batch_op.add_column(sa.Column('updated_at', sa.DateTime(timezone=True), nullable=True))
    for entry in conn.execute(sa.select(entry_t.c.id, entry_t.c.created_at)).all():
        row = latest.get(entry.id)
        conn.execute(
            sa.update(entry_t).where(entry_t.c.id == entry.id).values(
                status=STATUS_OF_KIND[row.kind] if row is not None else 'reserved',
                updated_at=row.created_at if row is not None else entry.created_at,
            )
        )
    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.alter_column('status', server_default=None)
        batch_op.alter_column('updated_at', existing_type=sa.DateTime(timezone=True),
                              nullable=False)

    # Not batch mode: copying and dropping dataset would trip the foreign keys that point at it
    # (SQLite >= 3.35 drops a plain column in place).
    for column in ('ledger_head_hash', 'ledger_head_seq'):
        op.execute(f'ALTER TABLE dataset DROP COLUMN {column}')
