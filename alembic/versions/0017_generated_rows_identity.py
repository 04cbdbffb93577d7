"""A synthetic dataset's identity covers the rows it generates, not only its (size, seed)

``dataset.content_fingerprint``: for a synthetic dataset, the content fingerprint an upload of
its generated rows (under the generator's schema) would have, so re-uploading a private
generator's rows as a public upload is refused like any registered source. Null for uploads
(their ``source_fingerprint`` already is their content) and for synthetic datasets registered
before this revision (their rows are not regenerated here: a migration should not run the
generator on every dataset; they keep the (size, seed) identity).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 13:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0017'
down_revision: str | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('content_fingerprint', sa.String(64), nullable=True))
    op.create_index('ix_dataset_content_fingerprint', 'dataset', ['content_fingerprint'],
                    unique=True)


def downgrade() -> None:
    op.drop_index('ix_dataset_content_fingerprint', table_name='dataset')
    op.drop_column('dataset', 'content_fingerprint')
