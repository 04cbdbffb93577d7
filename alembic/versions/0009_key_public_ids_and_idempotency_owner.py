"""API keys get a public id; idempotency keys belong to the API key that sent them

``api_key.prefix`` held the first 12 characters of every key, 8 of them secret (half of a
minimum-length ``DPCRISIS_ADMIN_KEY``), and the API showed them. It is dropped: new keys read
``dpk_<public id>_<secret>`` and only the public id is stored (``api_key.public_id``, unique);
keys made before show as ``key-<row id>``.

``idempotency_key.api_key_id``: a record is replayed only to the API key that made it, unique
per (API key, route, key) instead of per (route, key). Existing records are given the key that
made their resource, read from the audit log (``job.submitted`` / ``dataset.registered``); a
record without one stays unowned and is never replayed.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 00:30:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OWNER_FROM_AUDIT_LOG = """
UPDATE idempotency_key SET api_key_id = (
    SELECT e.api_key_id FROM audit_event e
    WHERE e.action = CASE idempotency_key.route WHEN 'POST /v1/jobs' THEN 'job.submitted'
                                                ELSE 'dataset.registered' END
      AND e.target = CASE idempotency_key.route WHEN 'POST /v1/jobs' THEN 'job/'
                                                ELSE 'dataset/' END
                     || CAST(idempotency_key.resource_id AS VARCHAR(20))
    ORDER BY e.id LIMIT 1)
"""


def upgrade() -> None:
    # Plain ADD / DROP COLUMN (no table rebuild: audit_event's foreign key points at api_key).
    op.add_column('api_key', sa.Column('public_id', sa.String(12), nullable=True))
    op.create_index('ix_api_key_public_id', 'api_key', ['public_id'], unique=True)
    op.drop_column('api_key', 'prefix')

    with op.batch_alter_table('idempotency_key') as batch:
        batch.add_column(sa.Column('api_key_id', sa.Integer(), nullable=True))
        batch.create_foreign_key('fk_idempotency_key_api_key_id_api_key', 'api_key',
                                 ['api_key_id'], ['id'])
        batch.drop_constraint('uq_idempotency_key_route', type_='unique')
        batch.create_unique_constraint('uq_idempotency_key_api_key_id',
                                       ['api_key_id', 'route', 'key'])
    op.execute(OWNER_FROM_AUDIT_LOG)


def downgrade() -> None:
    op.execute("DELETE FROM idempotency_key WHERE id NOT IN "
               "(SELECT min(id) FROM idempotency_key GROUP BY route, key)")
    with op.batch_alter_table('idempotency_key') as batch:
        batch.drop_constraint('uq_idempotency_key_api_key_id', type_='unique')
        batch.drop_constraint('fk_idempotency_key_api_key_id_api_key', type_='foreignkey')
        batch.drop_column('api_key_id')
        batch.create_unique_constraint('uq_idempotency_key_route', ['route', 'key'])

    # The secret characters are gone for good: old keys show their public id, or key-<id>.
    op.add_column('api_key', sa.Column('prefix', sa.String(16), nullable=False,
                                       server_default=''))
    op.execute("UPDATE api_key SET prefix = CASE WHEN public_id IS NULL "
               "THEN 'key-' || CAST(id AS VARCHAR(12)) ELSE 'dpk_' || public_id END")
    op.drop_index('ix_api_key_public_id', table_name='api_key')
    op.drop_column('api_key', 'public_id')
