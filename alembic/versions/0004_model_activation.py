"""model activation: append-only history of the model that scores by default

Until now scoring used the newest model. From here the active model is the newest
``model_activation`` row (``auto`` for the first model stored while none is active, ``activate``
by ``POST /v1/models/{id}/activate``, ``rollback`` by ``POST /v1/models/rollback``). An existing
deployment keeps scoring with the model it used before: if any model exists, the newest one gets
an ``auto`` activation.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 10:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.core.time import utcnow

revision: str = '0004'
down_revision: str | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

model_t = sa.table('model', sa.column('id', sa.Integer()))
activation_t = sa.table(
    'model_activation',
    *(sa.column(name, sa.Integer()) for name in ('id', 'seq', 'model_id', 'previous_model_id')),
    sa.column('action', sa.String()),
    sa.column('created_at', sa.DateTime(timezone=True)),
)


def _activate_newest_model() -> None:
    """Keep what scored before the upgrade (the newest model) scoring after it."""
    conn = op.get_bind()
    newest = conn.execute(sa.select(sa.func.max(model_t.c.id))).scalar()
    if newest is not None:
        conn.execute(sa.insert(activation_t).values(
            seq=1, model_id=newest, previous_model_id=None, action='auto', created_at=utcnow(),
        ))


def upgrade() -> None:
    op.create_table('model_activation',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('seq', sa.Integer(), nullable=False),
    sa.Column('model_id', sa.Integer(), nullable=False),
    sa.Column('previous_model_id', sa.Integer(), nullable=True),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("action IN ('auto', 'activate', 'rollback')",
                       name=op.f('ck_model_activation_action')),
    sa.ForeignKeyConstraint(['model_id'], ['model.id'],
                            name=op.f('fk_model_activation_model_id_model')),
    sa.ForeignKeyConstraint(['previous_model_id'], ['model.id'],
                            name=op.f('fk_model_activation_previous_model_id_model')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_model_activation')),
    sa.UniqueConstraint('seq', name=op.f('uq_model_activation_seq'))
    )
    with op.batch_alter_table('model_activation', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_model_activation_model_id'), ['model_id'],
                              unique=False)

    _activate_newest_model()


def downgrade() -> None:
    # The history is dropped; revision 0003 scores with the newest model again.
    with op.batch_alter_table('model_activation', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_model_activation_model_id'))

    op.drop_table('model_activation')
