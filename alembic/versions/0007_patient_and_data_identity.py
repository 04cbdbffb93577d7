"""Patient and data identity, and the Rényi filter's fixed order

``dataset.record_secret``: the key of each record's part (train / calibration / evaluation), a
keyed BLAKE2b of the record's id, so adding or removing one patient moves nobody else.
``dataset.n_train`` and ``n_calibration`` are recounted under the new coins. Past jobs keep the
sample rates they ran with (each job's held-out releases are on its own split, so parallel
composition holds per job); queued jobs run with their recorded rate over the new parts.

``dataset.source_fingerprint`` (unique): one registration per source. Where the same source
was registered more than once, the first registration keeps the fingerprint and the later ones
get none (they stay readable, but their budgets were never the patients' whole budget: the
privacy officer should retire them).

``dataset.filter_order``: the Rényi filter's order, fixed from the budget at registration.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 23:30:00
"""
import hashlib
import math
import secrets
from collections.abc import Sequence

import numpy as np
import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies (as of this revision) of app.datasets.patients.identity and app.privacy.filter.
ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
CUTS = np.array([0.7, 0.85])


def _parts(n_rows: int, secret: str) -> np.ndarray:
    key = bytes.fromhex(secret)
    digests = b"".join(hashlib.blake2b(str(i).encode(), key=key, digest_size=8).digest()
                       for i in range(n_rows))
    words = np.frombuffer(digests, dtype="<u8")
    coins = (words >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return np.searchsorted(CUTS, coins, side="right")


def _filter_order(epsilon: float, delta: float) -> float:
    def room(a: float) -> float:
        conversion = math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        return (epsilon - conversion) / a
    return float(max(ORDERS, key=room))


def upgrade() -> None:
    # Plain ADD COLUMN (no table rebuild: other tables' foreign keys point at dataset).
    op.add_column('dataset', sa.Column('n_calibration', sa.Integer(), nullable=False,
                                       server_default='0'))
    op.add_column('dataset', sa.Column('record_secret', sa.String(64), nullable=True))
    op.add_column('dataset', sa.Column('source_fingerprint', sa.String(64), nullable=True))
    op.add_column('dataset', sa.Column('filter_order', sa.Float(), nullable=True))
    dataset = sa.table('dataset', *(sa.column(c) for c in (
        'id', 'n_rows', 'seed', 'source_kind', 'n_train', 'n_calibration', 'record_secret',
        'source_fingerprint', 'filter_order', 'budget_epsilon', 'budget_delta')))
    bind = op.get_bind()
    seen: set[str] = set()
    for row in bind.execute(sa.select(dataset).order_by(dataset.c.id)).mappings().all():
        secret = secrets.token_hex(32)
        counts = np.bincount(_parts(row['n_rows'], secret), minlength=3)
        fingerprint = hashlib.sha256(
            f"synthetic:v1:{row['n_rows']}:{row['seed']}".encode()).hexdigest()
        order = (_filter_order(row['budget_epsilon'], row['budget_delta'])
                 if row['budget_epsilon'] is not None and row['budget_delta'] is not None
                 else None)
        bind.execute(sa.update(dataset).where(dataset.c.id == row['id']).values(
            record_secret=secret, n_train=int(counts[0]), n_calibration=int(counts[1]),
            source_fingerprint=None if fingerprint in seen else fingerprint,
            filter_order=order,
        ))
        seen.add(fingerprint)
    op.create_index('ix_dataset_source_fingerprint', 'dataset', ['source_fingerprint'],
                    unique=True)


def downgrade() -> None:
    op.drop_index('ix_dataset_source_fingerprint', table_name='dataset')
    for column in ('filter_order', 'source_fingerprint', 'record_secret', 'n_calibration'):
        op.drop_column('dataset', column)
