"""ledger: per-epoch commits (steps) and chained budget records

``ledger_event`` gains ``steps`` (a commit's cumulative charged steps) and ``budget_epsilon`` /
``budget_delta`` (a ``budget`` record: the dataset's budget from then on); ``entry_id`` becomes
nullable (budget records belong to no entry). Every existing dataset gets one ``budget`` record
at the end of its chain with its current budget, so budgets are tamper-evident from here on.
Hashes of existing records do not change: the new fields are hashed only when present.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 10:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.core.time import utcnow
from app.ledger.chain import event_content, record_hash

revision: str = '0003'
down_revision: str | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_KINDS = "kind IN ('reserve', 'commit', 'release')"
NEW_KINDS = "kind IN ('reserve', 'commit', 'release', 'budget')"

dataset_t = sa.table(
    'dataset',
    *(sa.column(name, sa.Integer()) for name in ('id', 'ledger_head_seq')),
    sa.column('ledger_head_hash', sa.String()),
    sa.column('budget_epsilon', sa.Float()),
    sa.column('budget_delta', sa.Float()),
)
event_t = sa.table(
    'ledger_event',
    *(sa.column(name, sa.Integer()) for name in ('id', 'dataset_id', 'entry_id', 'seq', 'steps')),
    *(sa.column(name, sa.String()) for name in ('kind', 'prev_hash', 'hash')),
    sa.column('budget_epsilon', sa.Float()),
    sa.column('budget_delta', sa.Float()),
    sa.column('created_at', sa.DateTime(timezone=True)),
)


def _append_budget_records() -> None:
    conn = op.get_bind()
    now = utcnow()
    for dataset in conn.execute(sa.select(dataset_t).order_by(dataset_t.c.id)).all():
        seq = dataset.ledger_head_seq + 1
        budget = (dataset.budget_epsilon, dataset.budget_delta)
        content = event_content(
            dataset_id=dataset.id, entry_id=None, seq=seq, kind='budget', created_at=now,
            entry=None, budget=budget,
        )
        digest = record_hash(content, dataset.ledger_head_hash)
        conn.execute(sa.insert(event_t).values(
            dataset_id=dataset.id, entry_id=None, seq=seq, kind='budget', created_at=now,
            budget_epsilon=budget[0], budget_delta=budget[1],
            prev_hash=dataset.ledger_head_hash, hash=digest,
        ))
        conn.execute(
            sa.update(dataset_t).where(dataset_t.c.id == dataset.id)
            .values(ledger_head_seq=seq, ledger_head_hash=digest)
        )


def upgrade() -> None:
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        batch_op.add_column(sa.Column('steps', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('budget_epsilon', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('budget_delta', sa.Float(), nullable=True))
        batch_op.alter_column('entry_id', existing_type=sa.Integer(), nullable=True)
        batch_op.drop_constraint(op.f('ck_ledger_event_kind'), type_='check')
        batch_op.create_check_constraint(op.f('ck_ledger_event_kind'), NEW_KINDS)
    _append_budget_records()


def downgrade() -> None:
    # Budget records cannot live in the old schema: drop them and move each head back to the
    # last remaining record (budget records were appended last, per dataset, by upgrade, but
    # later ones may sit between entry records: the chain is re-verified by the caller).
    conn = op.get_bind()
    conn.execute(sa.delete(event_t).where(event_t.c.kind == 'budget'))
    for dataset in conn.execute(sa.select(dataset_t.c.id)).all():
        last = conn.execute(
            sa.select(event_t.c.seq, event_t.c.hash).where(event_t.c.dataset_id == dataset.id)
            .order_by(event_t.c.seq.desc()).limit(1)
        ).first()
        conn.execute(
            sa.update(dataset_t).where(dataset_t.c.id == dataset.id).values(
                ledger_head_seq=last.seq if last else 0,
                ledger_head_hash=last.hash if last else '0' * 64,
            )
        )
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_ledger_event_kind'), type_='check')
        batch_op.create_check_constraint(op.f('ck_ledger_event_kind'), OLD_KINDS)
        batch_op.alter_column('entry_id', existing_type=sa.Integer(), nullable=False)
        batch_op.drop_column('budget_delta')
        batch_op.drop_column('budget_epsilon')
        batch_op.drop_column('steps')
