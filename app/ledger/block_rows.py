"""The patient blocks' rows written in bulk: an upload opens and closes thousands at once.

``app.ledger.spaces`` decides which blocks an upload closes and opens; these write them, on
SQLite through the driver (SQLAlchemy's per-row binding and its expansion of thousands of bound
ids took most of an upload's accept), on other databases through SQLAlchemy Core. They take the
blocks' table (``PatientBlock.__table__``) from their caller, which holds the space lock.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, insert, select, update
from sqlalchemy.orm import Session

Opened = tuple[list[int], int]
"""A block an upload opens: its datasets and size."""


def close(session: Session, table: Table, block_ids: list[int], now: datetime) -> None:
    """Close blocks, a few thousand per UPDATE (within SQLite's bound on parameters); on
    SQLite through the driver (``_sqlite_stamp``): SQLAlchemy's expansion of thousands of
    bound ids would take most of the statement's time."""
    stamp = (_sqlite_stamp(session, table, now)
             if session.get_bind().dialect.name == "sqlite" else None)
    for start in range(0, len(block_ids), 5000):
        chunk = block_ids[start:start + 5000]
        if stamp is not None:
            session.connection().exec_driver_sql(
                f"UPDATE {table.name} SET closed_at = ? "
                f"WHERE id IN ({', '.join('?' * len(chunk))})", (stamp, *chunk))
        else:
            session.execute(update(table).where(table.c.id.in_(chunk)).values(closed_at=now))


def _sqlite_stamp(session: Session, table: Table, now: datetime) -> Any:
    """``now`` as SQLAlchemy binds it to the blocks' timestamp columns on SQLite."""
    dialect = session.get_bind().dialect
    stamp = table.c.created_at.type.dialect_impl(dialect).bind_processor(dialect)
    return stamp(now) if stamp is not None else now


def insert_opened(session: Session, table: Table, space_id: int, opened: list[Opened],
                  now: datetime) -> list[int]:
    """Open blocks (their datasets, sorted and distinct, and sizes) in one executemany
    INSERT; their ids, in order.

    The ids are read back as this space's blocks above its highest id before the INSERT,
    in id order: the caller holds the space lock, so no other writer adds blocks to it, and
    ids grow in insertion order on both databases (checked: as many rows as opened, each
    with the size opened in its place, else nothing is kept; the datasets are not decoded
    again, a JSON parse per block). (``INSERT ... RETURNING`` with its order kept took twice
    as long for the 12,620 blocks an upload splitting 6,310 opens.)
    """
    if not opened:
        return []
    floor = session.scalar(select(func.max(table.c.id))
                           .where(table.c.space_id == space_id)) or 0
    if session.get_bind().dialect.name == "sqlite":
        _insert_sqlite(session, table, space_id, opened, now)
        found = session.connection().exec_driver_sql(  # the rows as the driver gives them
            f"SELECT id, size FROM {table.name} WHERE space_id = ? AND id > ? ORDER BY id",
            (space_id, floor)).tuples().all()
    else:
        session.execute(insert(table), [{"space_id": space_id, "datasets": datasets,
                                         "size": size, "created_at": now}
                                        for datasets, size in opened])
        found = session.execute(select(table.c.id, table.c.size)
                                .where(table.c.space_id == space_id, table.c.id > floor)
                                .order_by(table.c.id)).tuples().all()
    if [size for _, size in found] != [size for _, size in opened]:
        raise RuntimeError(f"space {space_id}: the blocks read back are not those opened")
    return [block for block, _ in found]


def _insert_sqlite(session: Session, table: Table, space_id: int, rows: list[Opened],
                   now: datetime) -> None:
    """The INSERT of ``insert_opened`` on SQLite through the driver's executemany, with the
    values SQLAlchemy would bind (``json.dumps`` of a list of ints, the timestamp as its type
    stores it, once): its per-row binding took most of an upload's 12,620 block rows."""
    created_at = _sqlite_stamp(session, table, now)
    session.connection().exec_driver_sql(
        f"INSERT INTO {table.name} (space_id, datasets, size, created_at) VALUES (?, ?, ?, ?)",
        [(space_id, "[" + ", ".join(map(str, datasets)) + "]", size, created_at)
         for datasets, size in rows])
