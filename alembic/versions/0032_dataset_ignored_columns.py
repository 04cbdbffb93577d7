"""dataset.ignored_columns: the uploaded file's columns its schema ignores

A schema may declare ``"extra_columns": "ignore"``: such columns are never read nor kept, and
the dataset names them. Existing rows stay null (no column was ignored).

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-02 16:40:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0032'
down_revision: str | None = '0031'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('ignored_columns', sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column('dataset', 'ignored_columns')
