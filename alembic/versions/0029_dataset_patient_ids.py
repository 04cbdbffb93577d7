"""dataset.patient_ids_sha256: patient ids a steward declared for rows received without them

A private upload registered before patient spaces without an id column cannot be found in
the organisation's patient space, so it takes no release. Its data steward can declare each
stored row's patient id (``PUT /v1/datasets/{id}/patient-ids``); they are kept in a file
beside the stored table, named by its SHA-256, which this column records
(``app.datasets.patients.patient_ids``). Null for every other dataset; no existing row changes.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-02 10:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0029'
down_revision: str | None = '0028'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('patient_ids_sha256', sa.String(64), nullable=True))


def downgrade() -> None:
    # The older code reads such a dataset's patients by their row numbers again, which the
    # organisation's index does not hold: a release that leaves anybody out then leaves out
    # every row of it, which over-charges and never under-charges.
    op.drop_column('dataset', 'patient_ids_sha256')
