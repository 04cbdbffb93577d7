"""patient_space.id_scheme: the scheme that digests a space's patient ids

A space's patient index holds each patient as the keyed digest of their id under the space's
secret; the scheme of that digest is recorded on the space when it is made, so that a newer
scheme in the code keys later tables into the space the way its earlier ones were keyed
(otherwise the same patient would become two: a second budget).

Every space that keys ids (a secret) was keyed with "aes-v2", the only scheme the patient
index has used since patient spaces exist (revision 0019); spaces without a secret (one
dataset's own, from before spaces) key nothing: null.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02 10:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0028'
down_revision: str | None = '0027'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

KEYED_WITH = "aes-v2"  # the scheme of every digest in every index before this revision


def upgrade() -> None:
    op.add_column('patient_space', sa.Column('id_scheme', sa.String(16), nullable=True))
    op.get_bind().execute(sa.text(
        "UPDATE patient_space SET id_scheme = :scheme WHERE secret IS NOT NULL"),
        {"scheme": KEYED_WITH})


def downgrade() -> None:
    # The older code keys every space with "aes-v2": a space keyed another way would have
    # its patients split between two digests.
    bind = op.get_bind()
    found = bind.execute(sa.text(
        "SELECT id FROM patient_space WHERE id_scheme IS NOT NULL AND id_scheme != :scheme"),
        {"scheme": KEYED_WITH}).scalars().all()
    if found:
        raise RuntimeError(f"patient spaces {sorted(found)} key their ids with another scheme "
                           f"than {KEYED_WITH!r}, which revision 0027 cannot: no downgrade "
                           "past them")
    # A plain DROP COLUMN: a batch rebuild of the table would break the foreign keys of the
    # datasets, blocks and chain records that point at it.
    op.drop_column('patient_space', 'id_scheme')
