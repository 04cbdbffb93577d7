"""Each upload keeps its table as the clinic sent it, and names the table's media type

``dataset.table_media_type``: ``text/csv`` or ``application/vnd.apache.parquet`` for a table kept
byte for byte as it was uploaded (``<DATA_DIR>/<sha256>.csv`` or ``.parquet``, the SHA-256 of the
clinic's own file), read back through the same validation that accepted it. Null for tables
stored before this revision, in the service's own Parquet layout (metadata in the footer),
which still load as they are: nothing is rewritten.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24 08:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0014'
down_revision: str | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ADD COLUMN, nullable: existing rows keep the stored layout they were written in.
    op.add_column('dataset', sa.Column('table_media_type', sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column('dataset', 'table_media_type')
