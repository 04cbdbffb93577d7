"""Declared schemas and uploaded tables

``dataset.schema_json`` / ``schema_hash``: the declared schema; every synthetic dataset gets the
crisis schema (the generator's). ``state``: awaiting_data | ready | erased (existing datasets
are ready). ``table_sha256`` and ``imputed``: an upload's stored table and the values imputed
with the reference. ``data_erased_at``: when ``DELETE /v1/datasets/{id}/data`` erased the rows.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 00:10:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ('schema_json', 'schema_hash', 'state', 'table_sha256', 'imputed', 'data_erased_at')


def upgrade() -> None:
    # The crisis schema as the service declares it at this revision (not a frozen copy: the
    # generator's schema and the service's reading of it must agree).
    from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
    from app.datasets.schema.dataset_schema import schema_hash

    op.add_column('dataset', sa.Column('schema_json', sa.JSON(), nullable=True))
    op.add_column('dataset', sa.Column('schema_hash', sa.String(64), nullable=True))
    op.add_column('dataset', sa.Column('state', sa.String(16), nullable=False,
                                       server_default='ready'))
    op.add_column('dataset', sa.Column('table_sha256', sa.String(64), nullable=True))
    op.add_column('dataset', sa.Column('imputed', sa.JSON(), nullable=True))
    op.add_column('dataset', sa.Column('data_erased_at', sa.DateTime(timezone=True),
                                       nullable=True))
    dataset = sa.table('dataset', sa.column('source_kind'), sa.column('schema_json', sa.JSON()),
                       sa.column('schema_hash'))
    op.get_bind().execute(sa.update(dataset).where(dataset.c.source_kind == 'synthetic').values(
        schema_json=BUILT_IN_SCHEMA.model_dump(mode='json', by_alias=True),
        schema_hash=schema_hash(BUILT_IN_SCHEMA)))


def downgrade() -> None:
    for column in reversed(COLUMNS):
        op.drop_column('dataset', column)
