"""job.payload: each task kind's typed payload; job.training only for a training request

The queue's rows held every kind's payload inside ``training``: a monitoring run's model and
notes, a comparison's two models, a federated part's federation, an audit's request. They move
to a new ``payload`` column (the kind's own model, ``worker.handlers``); ``training`` keeps
what is a training request (a training job's, a search's, an audit's target, a federated
site's local recipe) and is null for a monitoring run or a comparison. The downgrade puts each
payload back under its old key. No ledger record changes.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-02 19:40:00
"""
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = '0034'
down_revision: str | None = '0033'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# kind -> (the key its payload had in ``training``, whether ``training`` keeps the rest)
MOVED = {
    'monitoring': ('monitoring', False),
    'comparison': ('comparison', False),
    'federated': ('federation', True),
    'privacy_audit': ('audit', True),
}
# None is SQL NULL here, never the JSON text 'null' (as the model's columns write it)
JOB = sa.table('job', sa.column('id', sa.Integer()), sa.column('kind', sa.String()),
               sa.column('training', sa.JSON(none_as_null=True)),
               sa.column('payload', sa.JSON(none_as_null=True)))


def _set_training_nullable(nullable: bool) -> None:
    """Alter ``training``; SQLite rebuilds ``job``, which rows of other tables refer to, so
    its foreign keys are off for the rebuild and checked before it commits (as 0031)."""
    sqlite = op.get_bind().dialect.name == 'sqlite'
    context = op.get_context()
    if sqlite:
        with context.autocommit_block():  # a no-op inside a transaction: run it outside one
            op.execute("PRAGMA foreign_keys=OFF")
    with op.batch_alter_table('job', schema=None) as batch_op:
        batch_op.alter_column('training', existing_type=sa.JSON(), nullable=nullable)
    if not sqlite:
        return
    dangling = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if dangling:  # raised before the commit below: the rebuild is rolled back
        raise RuntimeError(f"rebuilding job broke foreign keys: {dangling}")
    with context.autocommit_block():  # commits the rebuild, then enforces foreign keys again
        op.execute("PRAGMA foreign_keys=ON")


def _rows() -> list[Any]:
    return list(op.get_bind().execute(
        sa.select(JOB.c.id, JOB.c.kind, JOB.c.training, JOB.c.payload)
        .where(JOB.c.kind.in_(tuple(MOVED)))).all())


def upgrade() -> None:
    op.add_column('job', sa.Column('payload', sa.JSON(), nullable=True))
    _set_training_nullable(True)
    for row in _rows():
        key, keeps = MOVED[row.kind]
        training = dict(row.training or {})
        payload = training.pop(key, None)
        op.get_bind().execute(JOB.update().where(JOB.c.id == row.id).values(
            payload=payload, training=training if keeps else None))


def downgrade() -> None:
    for row in _rows():
        key, keeps = MOVED[row.kind]
        training = dict(row.training or {}) if keeps else {}
        if row.payload is not None:
            training[key] = row.payload
        op.get_bind().execute(JOB.update().where(JOB.c.id == row.id).values(training=training))
    op.execute(JOB.update().where(JOB.c.training.is_(None)).values(training={}))
    _set_training_nullable(False)
    op.drop_column('job', 'payload')
