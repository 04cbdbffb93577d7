"""federations: the federation table

A federation as this service takes part in it: as its coordinator (its Flower
server's report is written here) or as one of its sites (a site's part is a job of kind
``federated``, whose ledger entry is an ordinary job entry). No existing row changes.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27 03:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0025'
down_revision: str | None = '0024'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'federation',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('address', sa.String(length=256), nullable=False),
        sa.Column('schema_sha256', sa.String(length=64), nullable=False),
        sa.Column('recipe', sa.JSON(), nullable=False),
        sa.Column('sites', sa.JSON(), nullable=False),
        sa.Column('site_name', sa.String(length=64), nullable=True),
        sa.Column('state', sa.String(length=16), nullable=False),
        sa.Column('report', sa.JSON(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )


def downgrade() -> None:
    # A federated job's training names its federation: refuse while any exists.
    bind = op.get_bind()
    found = bind.execute(sa.text("SELECT id FROM job WHERE kind = 'federated'")).scalars().all()
    if found:
        raise RuntimeError(f"jobs {sorted(found)} are federated: revision 0024 cannot read them")
    op.drop_table('federation')
