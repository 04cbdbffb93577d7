"""monitoring: follow-up cohorts (dataset columns) and monitoring runs

A generator dataset may carry a documented shift; a follow-up dataset names the model it follows and the period its rows cover; a monitoring run
names the model, the follow-up it is charged to, its job (kind ``monitoring``) and the
statistics release on the model's training dataset that its data drift is measured against.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26 20:00:00
"""
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0022'
down_revision: str | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('dataset', sa.Column('synthetic_shift', sa.String(32), nullable=True))
    op.add_column('dataset', sa.Column('follow_up_model_id', sa.Integer(), nullable=True))
    op.add_column('dataset', sa.Column('follow_up_period_start', sa.Date(), nullable=True))
    op.add_column('dataset', sa.Column('follow_up_period_end', sa.Date(), nullable=True))
    op.create_index('ix_dataset_follow_up_model_id', 'dataset', ['follow_up_model_id'])
    op.create_table(
        'monitoring_run',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('model_id', sa.Integer(), nullable=False),
        sa.Column('dataset_id', sa.Integer(), nullable=False),
        sa.Column('job_id', sa.Integer(), nullable=False),
        sa.Column('reference_release_id', sa.Integer(), nullable=True),
        sa.Column('target_epsilon', sa.Float(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['model_id'], ['model.id'],
                                name=op.f('fk_monitoring_run_model_id_model')),
        sa.ForeignKeyConstraint(['dataset_id'], ['dataset.id'],
                                name=op.f('fk_monitoring_run_dataset_id_dataset')),
        sa.ForeignKeyConstraint(['job_id'], ['job.id'],
                                name=op.f('fk_monitoring_run_job_id_job')),
        sa.ForeignKeyConstraint(['reference_release_id'], ['statistics_release.id'],
                                name=op.f('fk_monitoring_run_reference_release_id_'
                                          'statistics_release')),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_monitoring_run')),
        sa.UniqueConstraint('job_id', name=op.f('uq_monitoring_run_job_id')),
    )
    op.create_index('ix_monitoring_run_model_id', 'monitoring_run', ['model_id'])
    op.create_index('ix_monitoring_run_dataset_id', 'monitoring_run', ['dataset_id'])


def downgrade() -> None:
    op.drop_index('ix_monitoring_run_dataset_id', table_name='monitoring_run')
    op.drop_index('ix_monitoring_run_model_id', table_name='monitoring_run')
    op.drop_table('monitoring_run')
    op.drop_index('ix_dataset_follow_up_model_id', table_name='dataset')
    for column in ('follow_up_period_end', 'follow_up_period_start', 'follow_up_model_id',
                   'synthetic_shift'):
        op.drop_column('dataset', column)
