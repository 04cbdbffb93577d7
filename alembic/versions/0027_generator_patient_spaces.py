"""generator patient spaces: patient_space.source_key

A generator dataset's patients are its seed's rows whatever else its registration varies (a
shift, a size): every private generator dataset of seed s is in one patient space, found by
its ``source_key`` "synthetic:<s>" (kind "generator"; patient i is row i, its id keyed under
the space's secret like an upload's: ``app.datasets.patients.generator_space``). Null for every other
space; unique where set.

No existing row changes here. The datasets migration 0019 left in spaces of their own (a
generator dataset's, an upload's from before spaces) are moved into the seed's space or the
organisation's when the service starts (``app.flows.patient_spaces``): their patients are
keyed into the patient index, whose files live under the data directory, which a migration
does not read or write; the move is chained in both spaces as an upload is.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 09:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0027'
down_revision: str | None = '0026'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('patient_space', sa.Column('source_key', sa.String(64), nullable=True))
    op.create_index('ix_patient_space_source_key', 'patient_space', ['source_key'], unique=True)


def downgrade() -> None:
    # A seed's space then looks like one dataset's own: the older code keys nothing into
    # it and would open each new generator dataset a space of its own, a second budget.
    bind = op.get_bind()
    found = bind.execute(sa.text(
        "SELECT id FROM patient_space WHERE kind = 'generator'")).scalars().all()
    if found:
        raise RuntimeError(f"patient spaces {sorted(found)} hold generator seeds' patients, "
                           "which revision 0026 cannot key: no downgrade past them")
    op.drop_index('ix_patient_space_source_key', table_name='patient_space')
    # A plain DROP COLUMN: a batch rebuild of the table would break the foreign keys of the
    # datasets, blocks and chain records that point at it.
    op.drop_column('patient_space', 'source_key')
