"""DP cohort statistics on the same ledger: statistics_release, and ledger entries that belong to
a job or to a statistics release

``statistics_release`` holds each answered request (its queries, noisy answers, mechanism).
``ledger_entry.job_id`` becomes nullable, beside a new ``statistics_release_id`` (unique, a
foreign key) and ``components`` (a release's noise multipliers, JSON); a check constraint keeps
exactly one owner per entry. Existing entries (all jobs') keep their hashes: the new fields are
hashed only for a statistics release's entry (``app.ledger.chain.entry_content``).

On SQLite the entry table is rebuilt (batch mode), which dropping a table that
``ledger_event`` still references would refuse: the event table's foreign key is taken off
first and put back after, each step a legal copy inside the one transaction.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 03:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

EVENT_ENTRY_FK = 'fk_ledger_event_entry_id_ledger_entry'
OWNER = "(job_id IS NULL) <> (statistics_release_id IS NULL)"


def _sqlite() -> bool:
    return op.get_bind().dialect.name == 'sqlite'


def _event_entry_fk(present: bool) -> None:
    """Take the event table's foreign key to ledger_entry off (SQLite, before rebuilding the
    entry table) or put it back."""
    if not _sqlite():
        return
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        if present:
            batch_op.create_foreign_key(EVENT_ENTRY_FK, 'ledger_entry', ['entry_id'], ['id'])
        else:
            batch_op.drop_constraint(EVENT_ENTRY_FK, type_='foreignkey')


def upgrade() -> None:
    op.create_table('statistics_release',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.Integer(), nullable=False),
    sa.Column('mechanism', sa.String(length=16), nullable=False),
    sa.Column('target_epsilon', sa.Float(), nullable=False),
    sa.Column('delta', sa.Float(), nullable=True),
    sa.Column('rows', sa.Integer(), nullable=False),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('answers', sa.JSON(), nullable=False),
    sa.Column('library', sa.String(length=32), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'],
                            name=op.f('fk_statistics_release_dataset_id_dataset')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_statistics_release')),
    )
    with op.batch_alter_table('statistics_release', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_statistics_release_dataset_id'), ['dataset_id'],
                              unique=False)

    _event_entry_fk(present=False)
    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.alter_column('job_id', existing_type=sa.Integer(), nullable=True)
        batch_op.add_column(sa.Column('statistics_release_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('components', sa.JSON(), nullable=True))
        batch_op.create_unique_constraint(
            batch_op.f('uq_ledger_entry_statistics_release_id'), ['statistics_release_id'])
        batch_op.create_foreign_key(
            batch_op.f('fk_ledger_entry_statistics_release_id_statistics_release'),
            'statistics_release', ['statistics_release_id'], ['id'])
        batch_op.create_check_constraint(batch_op.f('ck_ledger_entry_owner'), OWNER)
    _event_entry_fk(present=True)


def downgrade() -> None:
    conn = op.get_bind()
    held = conn.execute(sa.text("SELECT count(*) FROM statistics_release")).scalar_one()
    if held:
        raise RuntimeError(
            f"{held} statistics release(s) are charged in the ledger; revision 0010 has no "
            "place for them, and the append-only ledger cannot drop them"
        )
    _event_entry_fk(present=False)
    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('ck_ledger_entry_owner'), type_='check')
        batch_op.drop_constraint(
            batch_op.f('fk_ledger_entry_statistics_release_id_statistics_release'),
            type_='foreignkey')
        batch_op.drop_constraint(batch_op.f('uq_ledger_entry_statistics_release_id'),
                                 type_='unique')
        batch_op.drop_column('components')
        batch_op.drop_column('statistics_release_id')
        batch_op.alter_column('job_id', existing_type=sa.Integer(), nullable=False)
    _event_entry_fk(present=True)

    with op.batch_alter_table('statistics_release', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_statistics_release_dataset_id'))
    op.drop_table('statistics_release')
