"""0018 stores every ledger entry's release as a dp-accounting event and moves each chain to
hash scheme 2 by one ``scheme`` record: earlier records keep their scheme-1 hashes, every chain
verifies, every figure is the float it was, an edited event is caught at the scheme record,
records appended afterwards are scheme 2, and it downgrades (SQLite and PostgreSQL)."""

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import select, text

from app.core.database import Database
from app.core.migrations import alembic_config
from app.ledger import chain
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry, LedgerEvent
from app.privacy import events
from tests.db.test_ledger_chain_migration import _seed_0001

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

T1 = datetime(2026, 2, 1, tzinfo=UTC)
RELEASES = ((11, "gaussian", [2.0, 3.0]), (12, "laplace", [4.0, 10.0]))
# The JSON columns as revision 0017 (and 0018, for ``event``) have them.
entry_t = sa.table("ledger_entry", *(sa.column(n) for n in (
    "id", "dataset_id", "statistics_release_id", "mechanism", "noise_multiplier",
    "sample_rate", "steps", "clip_norm", "delta", "accountant", "created_at")),
    sa.column("components", sa.JSON()), sa.column("event", sa.JSON()))


def _release_entry(entry_id: int, kind: str, components: list[float]) -> SimpleNamespace:
    multiplier = (sum(c**-2 for c in components) ** -0.5 if kind == "gaussian"
                  else 1 / sum(1 / c for c in components))
    return SimpleNamespace(
        id=entry_id, dataset_id=1, job_id=None, statistics_release_id=entry_id,
        mechanism=kind, noise_multiplier=multiplier, sample_rate=1.0, steps=1, clip_norm=1.0,
        delta=1e-5, accountant="rdp", epsilon_rdp=None, epsilon_prv=None, created_at=T1,
        components=components)


def _seed_releases_0017(db: Database) -> None:
    """Two statistics releases of dataset 1, reserved and committed under scheme 1."""
    with db.engine.begin() as conn:
        seq, head = conn.execute(text(
            "SELECT ledger_head_seq, ledger_head_hash FROM dataset WHERE id = 1")).one()
        for entry_id, kind, components in RELEASES:
            conn.execute(text(
                "INSERT INTO statistics_release (id, dataset_id, mechanism, target_epsilon, "
                "delta, rows, request, answers, library, created_at) VALUES (:id, 1, :k, 0.5, "
                "NULL, 2000, '{}', '[]', 'opendp', :t)"), {"id": entry_id, "k": kind, "t": T1})
            entry = _release_entry(entry_id, kind, components)
            conn.execute(sa.insert(entry_t).values(
                id=entry_id, dataset_id=1, statistics_release_id=entry_id, mechanism=kind,
                noise_multiplier=entry.noise_multiplier, sample_rate=1.0, steps=1,
                clip_norm=1.0, delta=1e-5, accountant="rdp", components=components,
                created_at=T1))
            for kind_of_record, steps in (("reserve", None), ("commit", 1)):
                seq += 1
                content = chain.event_content(
                    dataset_id=1, entry_id=entry_id, seq=seq, kind=kind_of_record,
                    created_at=T1, entry=entry if kind_of_record == "reserve" else None,
                    steps=steps)
                digest = chain.record_hash(content, head)
                conn.execute(text(
                    "INSERT INTO ledger_event (dataset_id, entry_id, seq, kind, created_at, "
                    "steps, prev_hash, hash) VALUES (1, :e, :s, :k, :t, :n, :p, :h)"),
                    {"e": entry_id, "s": seq, "k": kind_of_record, "t": T1, "n": steps,
                     "p": head, "h": digest})
                head = digest
        conn.execute(text("UPDATE dataset SET ledger_head_seq = :s, ledger_head_hash = :h "
                          "WHERE id = 1"), {"s": seq, "h": head})


def _columns_only(entry: LedgerEntry) -> LedgerEntry:
    """The entry as it was before events were stored: its columns alone."""
    names = ("id", "dataset_id", "job_id", "statistics_release_id", "mechanism",
             "noise_multiplier", "sample_rate", "steps", "clip_norm", "delta", "accountant",
             "components", "created_at")
    return LedgerEntry(**{name: getattr(entry, name) for name in names})


def _figures(entries: list[LedgerEntry], charged: list[int]) -> list[Any]:
    """Each entry's RDP at a few orders and its tight epsilon, in full and as charged."""
    return [(ledger_spend.entry_rdp_at(e, order, steps),
             ledger_spend.single_release_epsilon(e, 1e-5, steps))
            for e, held in zip(entries, charged, strict=True) for steps in (e.steps, held)
            for order in (2.0, 11.0, 256.0)]


def test_entries_become_events_and_every_chain_still_verifies(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0001")
    db = Database(database_url)
    try:
        _seed_0001(db)
        command.upgrade(config, "0017")
        _seed_releases_0017(db)
        command.upgrade(config, "head")
        with db.session_scope() as session:
            assert chain.verify(session=session, dataset_id=1)["valid"]
            assert chain.verify(session=session, dataset_id=2)["valid"]
            records = session.scalars(select(LedgerEvent).where(LedgerEvent.dataset_id == 1)
                                      .order_by(LedgerEvent.seq)).all()
            assert [r.scheme for r in records] == [1] * (len(records) - 1) + [2]
            assert records[-1].kind == "scheme" and records[-1].entry_id is None
            entries = list(session.scalars(select(LedgerEntry).where(
                LedgerEntry.dataset_id == 1).order_by(LedgerEntry.id)))
            assert entries[0].event == events.to_json(events.dpsgd(2.0, 0.2, 15))
            assert entries[-1].event == events.to_json(events.one_shot("laplace", [4.0, 10.0]))
            # Every figure from the stored events is the float the columns gave before.
            charged = [e.charged_steps for e in entries]
            assert _figures(entries, charged) == _figures([_columns_only(e) for e in entries],
                                                          charged)
            # Records appended from now on hash under scheme 2, events included.
            chain.append(session=session, dataset_id=1, kind="budget", budget=(10.0, 1e-5))
        with db.session_scope() as session:
            verified = chain.verify(session=session, dataset_id=1)
            assert verified["valid"] and verified["records"] == len(records) + 1, verified
    finally:
        db.dispose()


def test_an_edited_migrated_event_breaks_the_chain_at_its_scheme_record(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0001")
    db = Database(database_url)
    try:
        _seed_0001(db)
        command.upgrade(config, "0017")
        _seed_releases_0017(db)
        command.upgrade(config, "head")
        quieter = events.to_json(events.one_shot("gaussian", [20.0, 30.0]))
        with db.engine.begin() as conn:
            conn.execute(sa.update(entry_t).where(entry_t.c.id == 11).values(event=quieter))
            scheme_id = conn.execute(text(
                "SELECT id FROM ledger_event WHERE kind = 'scheme' AND dataset_id = 1"
            )).scalar_one()
        with db.session_scope() as session:
            result = chain.verify(session=session, dataset_id=1)
        assert result["valid"] is False
        assert result["first_invalid"]["id"] == scheme_id
        assert "hash" in result["first_invalid"]["reason"]
    finally:
        db.dispose()


def test_downgrade_drops_the_scheme_records_and_refuses_once_scheme_2_was_written(
    database_url: str,
) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "0001")
    db = Database(database_url)
    try:
        _seed_0001(db)
        command.upgrade(config, "head")
        command.downgrade(config, "0017")
        with db.engine.connect() as conn:
            kinds = conn.execute(text("SELECT DISTINCT kind FROM ledger_event")).scalars().all()
            head = conn.execute(text("SELECT ledger_head_hash FROM dataset WHERE id = 1")).one()
            last = conn.execute(text("SELECT hash FROM ledger_event WHERE dataset_id = 1 "
                                     "ORDER BY seq DESC LIMIT 1")).one()
        assert "scheme" not in kinds and head == last
        command.upgrade(config, "head")
        with db.session_scope() as session:
            assert chain.verify(session=session, dataset_id=1)["valid"]
            chain.append(session=session, dataset_id=1, kind="budget", budget=(10.0, 1e-5))
        with pytest.raises(RuntimeError, match="scheme 2"):
            command.downgrade(config, "0017")
    finally:
        db.dispose()
