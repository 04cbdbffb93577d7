"""CDS Hooks: the JWT ids already seen (replay protection across API processes), and feedback

``cds_token_seen`` holds a SHA-256 of each accepted client JWT's (iss, jti) until the token
expires; its primary key makes the second use of a pair fail in whichever process tries it.
``cds_feedback`` holds the card outcomes EHRs report (no patient data, no free-text comment).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24 04:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0012'
down_revision: str | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('cds_token_seen',
    sa.Column('token_sha256', sa.String(length=64), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('token_sha256', name=op.f('pk_cds_token_seen'))
    )
    op.create_index(op.f('ix_cds_token_seen_expires_at'), 'cds_token_seen', ['expires_at'],
                    unique=False)
    op.create_table('cds_feedback',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('received_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('service_id', sa.String(length=64), nullable=False),
    sa.Column('card', sa.String(length=64), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('outcome_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('override_reason', sa.String(length=300), nullable=True),
    sa.Column('accepted_suggestions', sa.Integer(), nullable=False),
    sa.Column('actor', sa.String(length=100), nullable=False),
    sa.Column('api_key_id', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['api_key_id'], ['api_key.id'],
                            name=op.f('fk_cds_feedback_api_key_id_api_key')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cds_feedback'))
    )
    op.create_index(op.f('ix_cds_feedback_card'), 'cds_feedback', ['card'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_cds_feedback_card'), table_name='cds_feedback')
    op.drop_table('cds_feedback')
    op.drop_index(op.f('ix_cds_token_seen_expires_at'), table_name='cds_token_seen')
    op.drop_table('cds_token_seen')
