"""ledger: every entry stores its release as a dp-accounting DpEvent; hash scheme 2

``ledger_entry.event``: the entry's release as a dp-accounting event (``app.privacy.events``),
what the accountants compose from now on. Existing entries get the event their mechanism
columns record (``events.from_columns``: DP-SGD as ``SelfComposedDpEvent(PoissonSampledDpEvent(
q, GaussianDpEvent(sigma)), steps)``, a statistics release as its vectors' Gaussian or Laplace
events composed); an entry whose columns cannot be read (already an integrity fault) gets an
``UnsupportedDpEvent``, which the accountants count as non-private, and ``verify`` names it.

``ledger_event.scheme``: the hash scheme of each record (``app.ledger.chain``). Existing records
stay scheme 1 and keep their hashes: history is not re-written. Each dataset whose chain has
reserved entries gets one ``scheme`` record at its end (scheme 2), committing to those entries'
events; records appended from then on are scheme 2 and hash a reserved entry's event with it.

Downgrade drops the scheme records and the events, and refuses while any other record is
hashed under scheme 2 (revision 0017 could not verify it).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 09:00:00
"""
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from app.core.time import utcnow
from app.ledger.hashing import event_content, record_hash, reserved_events
from app.privacy import events

revision: str = '0018'
down_revision: str | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_KINDS = "kind IN ('reserve', 'commit', 'release', 'budget')"
NEW_KINDS = "kind IN ('reserve', 'commit', 'release', 'budget', 'scheme')"
EVENT_ENTRY_FK = 'fk_ledger_event_entry_id_ledger_entry'
EVENT_SCHEME = 2
UNREADABLE = {"type": "UnsupportedDpEvent"}

dataset_t = sa.table(
    'dataset',
    *(sa.column(name, sa.Integer()) for name in ('id', 'ledger_head_seq')),
    sa.column('ledger_head_hash', sa.String()),
)
entry_t = sa.table(
    'ledger_entry',
    *(sa.column(name, sa.Integer()) for name in ('id', 'job_id', 'statistics_release_id',
                                                  'steps')),
    sa.column('mechanism', sa.String()),
    sa.column('noise_multiplier', sa.Float()),
    sa.column('sample_rate', sa.Float()),
    sa.column('components', sa.JSON()),
    sa.column('event', sa.JSON()),
)
event_t = sa.table(
    'ledger_event',
    *(sa.column(name, sa.Integer()) for name in ('id', 'dataset_id', 'entry_id', 'seq',
                                                  'scheme')),
    *(sa.column(name, sa.String()) for name in ('kind', 'prev_hash', 'hash')),
    sa.column('created_at', sa.DateTime(timezone=True)),
)


def _sqlite() -> bool:
    return op.get_bind().dialect.name == 'sqlite'


def _event_entry_fk(present: bool) -> None:
    """Take the event table's foreign key to ledger_entry off (SQLite, before rebuilding the
    entry table) or put it back (as revision 0011 does)."""
    if not _sqlite():
        return
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        if present:
            batch_op.create_foreign_key(EVENT_ENTRY_FK, 'ledger_entry', ['entry_id'], ['id'])
        else:
            batch_op.drop_constraint(EVENT_ENTRY_FK, type_='foreignkey')


def _event_of(row: Any) -> dict[str, Any]:
    try:
        return events.to_json(events.from_columns(
            mechanism=row.mechanism, noise_multiplier=row.noise_multiplier,
            sample_rate=row.sample_rate, steps=row.steps, components=row.components,
            release=row.statistics_release_id is not None))
    except (ValueError, TypeError):
        return UNREADABLE


def _backfill_events() -> dict[int, dict[str, Any]]:
    conn = op.get_bind()
    found = {}
    for row in conn.execute(sa.select(entry_t).order_by(entry_t.c.id)).all():
        found[row.id] = _event_of(row)
        conn.execute(sa.update(entry_t).where(entry_t.c.id == row.id)
                     .values(event=found[row.id]))
    return found


class _Stored:
    """An entry as ``reserved_events`` reads it: its id and its stored event."""

    def __init__(self, entry_id: int, event: dict[str, Any]) -> None:
        self.id, self.event = entry_id, event


def _append_scheme_records(stored: dict[int, dict[str, Any]]) -> None:
    conn = op.get_bind()
    now = utcnow()
    for dataset in conn.execute(sa.select(dataset_t).order_by(dataset_t.c.id)).all():
        reserved = conn.execute(
            sa.select(event_t.c.entry_id)
            .where(event_t.c.dataset_id == dataset.id, event_t.c.kind == 'reserve')
            .order_by(event_t.c.seq)
        ).scalars().all()
        if not reserved:
            continue
        seq = dataset.ledger_head_seq + 1
        covered = reserved_events([_Stored(i, stored.get(i, UNREADABLE)) for i in reserved])
        content = event_content(
            dataset_id=dataset.id, entry_id=None, seq=seq, kind='scheme', created_at=now,
            entry=None, scheme=EVENT_SCHEME, events=covered,
        )
        digest = record_hash(content, dataset.ledger_head_hash)
        conn.execute(sa.insert(event_t).values(
            dataset_id=dataset.id, entry_id=None, seq=seq, kind='scheme', created_at=now,
            scheme=EVENT_SCHEME, prev_hash=dataset.ledger_head_hash, hash=digest,
        ))
        conn.execute(
            sa.update(dataset_t).where(dataset_t.c.id == dataset.id)
            .values(ledger_head_seq=seq, ledger_head_hash=digest)
        )


def upgrade() -> None:
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        batch_op.add_column(sa.Column('scheme', sa.Integer(), server_default='1',
                                      nullable=False))
        batch_op.drop_constraint(op.f('ck_ledger_event_kind'), type_='check')
        batch_op.create_check_constraint(op.f('ck_ledger_event_kind'), NEW_KINDS)
    op.add_column('ledger_entry', sa.Column('event', sa.JSON(), nullable=True))
    stored = _backfill_events()
    _event_entry_fk(present=False)
    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.alter_column('event', existing_type=sa.JSON(), nullable=False)
    _event_entry_fk(present=True)
    _append_scheme_records(stored)


def downgrade() -> None:
    conn = op.get_bind()
    later = conn.execute(
        sa.select(sa.func.count()).select_from(event_t)
        .where(event_t.c.scheme >= EVENT_SCHEME, event_t.c.kind != 'scheme')
    ).scalar_one()
    if later:
        raise RuntimeError(
            f"{later} ledger record(s) are hashed under scheme 2 (with their entries' events); "
            "revision 0017 could not verify them, and the append-only ledger cannot re-hash "
            "them")
    conn.execute(sa.delete(event_t).where(event_t.c.kind == 'scheme'))
    for dataset in conn.execute(sa.select(dataset_t.c.id)).all():
        last = conn.execute(
            sa.select(event_t.c.seq, event_t.c.hash).where(event_t.c.dataset_id == dataset.id)
            .order_by(event_t.c.seq.desc()).limit(1)
        ).first()
        conn.execute(
            sa.update(dataset_t).where(dataset_t.c.id == dataset.id).values(
                ledger_head_seq=last.seq if last else 0,
                ledger_head_hash=last.hash if last else '0' * 64,
            )
        )
    with op.batch_alter_table('ledger_event', schema=None) as batch_op:
        batch_op.drop_constraint(op.f('ck_ledger_event_kind'), type_='check')
        batch_op.create_check_constraint(op.f('ck_ledger_event_kind'), OLD_KINDS)
        batch_op.drop_column('scheme')
    _event_entry_fk(present=False)
    with op.batch_alter_table('ledger_entry', schema=None) as batch_op:
        batch_op.drop_column('event')
    _event_entry_fk(present=True)
