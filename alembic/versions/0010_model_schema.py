"""Models record the declared schema they were trained on, and its hash

Scoring validates a patient against the scoring model's schema and encodes it with that
schema's encoding (``app.datasets.schema.encoding``); the artifact records the same hash and is refused
against another. Existing models take their dataset's schema (every model so far was trained
on the crisis generator, whose schema migration 0008 recorded on its dataset).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 02:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('model', sa.Column('schema_json', sa.JSON(), nullable=True))
    op.add_column('model', sa.Column('schema_hash', sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE model SET schema_json = (SELECT d.schema_json FROM dataset d "
        "WHERE d.id = model.dataset_id), schema_hash = (SELECT d.schema_hash FROM dataset d "
        "WHERE d.id = model.dataset_id)"
    )


def downgrade() -> None:
    # Plain DROP COLUMN, no table rebuild: model_activation's foreign keys point at model.
    op.drop_column('model', 'schema_hash')
    op.drop_column('model', 'schema_json')
