"""Patient spaces and blocks: a budget per patient across the datasets that hold them

``patient_space`` holds a per-patient budget (epsilon, delta, the filter's fixed order), the
PRF key of the organisation's patient ids (its private uploads share one space) and the
patient index's SHA-256; ``patient_block`` the sets of a space's patients with the same
datasets (their sizes; closed, never edited, when an upload splits them);
``dataset.patient_space_id`` the space a dataset's releases also charge (app.ledger.spaces).

The organisation's space is created here (a fresh key; per-patient budget epsilon 8 at delta
1e-6). Existing datasets with a budget become one space each, with the dataset's own budget and
filter order, holding one block (the dataset's rows): their admissions decide exactly as before
and their ledgers and chains are untouched (the per-dataset chain still verifies; a space of one
dataset adds nothing to chain). Public datasets (no budget) get no space.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 17:00:00
"""
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = '0019'
down_revision: str | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


FK = 'fk_dataset_patient_space_id_patient_space'
EPSILON, DELTA = 8.0, 1e-6


def upgrade() -> None:
    op.create_table(
        'patient_space',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('kind', sa.String(16), nullable=False),
        sa.Column('secret', sa.String(64), nullable=True),
        sa.Column('budget_epsilon', sa.Float(), nullable=False),
        sa.Column('budget_delta', sa.Float(), nullable=False),
        sa.Column('filter_order', sa.Float(), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('index_sha256', sa.String(64), nullable=True),
        sa.Column('index_rows', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        'patient_block',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('space_id', sa.Integer(), nullable=False),
        sa.Column('datasets', sa.JSON(), nullable=False),
        sa.Column('size', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('closed_at', sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(['space_id'], ['patient_space.id'],
                                name='fk_patient_block_space_id_patient_space'),
    )
    op.create_index('ix_patient_block_space_id', 'patient_block', ['space_id'])
    if op.get_bind().dialect.name == 'sqlite':  # no ALTER of constraints: the column's own
        op.execute(f"ALTER TABLE dataset ADD COLUMN patient_space_id INTEGER CONSTRAINT {FK} "
                   "REFERENCES patient_space (id)")
    else:
        op.add_column('dataset', sa.Column('patient_space_id', sa.Integer(), nullable=True))
        op.create_foreign_key(FK, 'dataset', 'patient_space', ['patient_space_id'], ['id'])
    op.create_index('ix_dataset_patient_space_id', 'dataset', ['patient_space_id'])
    _organisation_space()
    _one_space_per_budgeted_dataset()


def _organisation_space() -> None:
    """The organisation's space, which every later private upload joins: a fresh PRF key and
    the per-patient budget of epsilon 8 at delta 1e-6 (tables of up to 100,000 rows), its filter
    order fixed from it now, as the code of this revision fixes it."""
    from app.privacy.filter import filter_order

    op.get_bind().execute(sa.text(
        "INSERT INTO patient_space (kind, secret, budget_epsilon, budget_delta, filter_order, "
        "version, index_rows, created_at) VALUES ('organisation', :k, :e, :d, :o, 0, 0, :t)"),
        {"k": secrets.token_hex(32), "e": EPSILON, "d": DELTA,
         "o": filter_order(EPSILON, DELTA), "t": datetime.now(UTC)})


def _one_space_per_budgeted_dataset() -> None:
    bind = op.get_bind()
    now = datetime.now(UTC)
    rows = bind.execute(sa.text(
        "SELECT id, n_rows, budget_epsilon, budget_delta, filter_order FROM dataset "
        "WHERE budget_epsilon IS NOT NULL AND budget_delta IS NOT NULL ORDER BY id")).all()
    for dataset_id, n_rows, epsilon, delta, order in rows:
        space_id = bind.execute(sa.text(
            "INSERT INTO patient_space (kind, budget_epsilon, budget_delta, filter_order, "
            "version, index_rows, created_at) VALUES ('dataset', :e, :d, :o, 0, 0, :t) "
            "RETURNING id"), {"e": epsilon, "d": delta, "o": order, "t": now}).scalar_one()
        if n_rows:
            bind.execute(sa.text(
                "INSERT INTO patient_block (space_id, datasets, size, created_at) "
                "VALUES (:s, :ds, :n, :t)"),
                {"s": space_id, "ds": f"[{dataset_id}]", "n": n_rows, "t": now})
        bind.execute(sa.text("UPDATE dataset SET patient_space_id = :s WHERE id = :i"),
                     {"s": space_id, "i": dataset_id})


def downgrade() -> None:
    op.drop_index('ix_dataset_patient_space_id', table_name='dataset')
    if op.get_bind().dialect.name == 'sqlite':  # drops the column and its own constraint
        op.execute("ALTER TABLE dataset DROP COLUMN patient_space_id")
    else:
        op.drop_constraint(FK, 'dataset', type_='foreignkey')
        op.drop_column('dataset', 'patient_space_id')
    op.drop_index('ix_patient_block_space_id', table_name='patient_block')
    op.drop_table('patient_block')
    op.drop_table('patient_space')
