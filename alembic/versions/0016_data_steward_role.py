"""The data steward role

``api_key.role`` may be ``data_steward``: the role that registers datasets, sends and erases
their rows and reads their exact intake facts (a data scientist's upload that
collided with a registered table answered "is this exact table registered?"). Existing keys
keep their roles; only the CHECK constraint ``ck_api_key_role`` widens.

PostgreSQL drops and recreates the constraint. SQLite cannot alter a constraint, so the table
is rebuilt (Alembic's batch mode); ``audit_event`` and ``idempotency_key`` refer to it, and
with foreign keys enforced the old table could not be dropped, so the rebuild follows SQLite's
own procedure: foreign keys off (outside a transaction, where the pragma takes effect), the
rebuild, ``PRAGMA foreign_key_check``, foreign keys on.

Downgrading revokes every data steward key and names it (and its audit events) a data
scientist, the only role the older code knows that once held these routes: a revoked key
opens nothing, and the older code serves only the four roles it knows.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 15:00:00
"""
from collections.abc import Sequence

from alembic import op

revision: str = '0016'
down_revision: str | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of app.auth.models.ROLES before and after this revision.
OLD_ROLES = ('admin', 'data_scientist', 'privacy_officer', 'clinician')
NEW_ROLES = ('admin', 'data_steward', 'data_scientist', 'privacy_officer', 'clinician')
CONSTRAINT = 'ck_api_key_role'


def _set_roles(roles: tuple[str, ...]) -> None:
    """Make ``ck_api_key_role`` admit exactly ``roles``."""
    condition = f"role IN {roles!r}"
    if op.get_bind().dialect.name != 'sqlite':
        op.drop_constraint(op.f(CONSTRAINT), 'api_key', type_='check')
        op.create_check_constraint(op.f(CONSTRAINT), 'api_key', condition)
        return
    context = op.get_context()
    with context.autocommit_block():  # a no-op inside a transaction: run it outside one
        op.execute("PRAGMA foreign_keys=OFF")
    with op.batch_alter_table('api_key', recreate='always') as batch:
        batch.drop_constraint(op.f(CONSTRAINT), type_='check')
        batch.create_check_constraint(op.f(CONSTRAINT), condition)
    dangling = op.get_bind().exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if dangling:  # raised before the commit below: the rebuild is rolled back
        raise RuntimeError(f"rebuilding api_key broke foreign keys: {dangling}")
    with context.autocommit_block():  # commits the rebuild, then enforces foreign keys again
        op.execute("PRAGMA foreign_keys=ON")


def upgrade() -> None:
    _set_roles(NEW_ROLES)


def downgrade() -> None:
    op.execute("UPDATE api_key SET revoked_at = CURRENT_TIMESTAMP "
               "WHERE role = 'data_steward' AND revoked_at IS NULL")
    op.execute("UPDATE api_key SET role = 'data_scientist' WHERE role = 'data_steward'")
    op.execute("UPDATE audit_event SET role = 'data_scientist' WHERE role = 'data_steward'")
    _set_roles(OLD_ROLES)
