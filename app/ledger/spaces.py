"""Patient spaces and blocks: the budget belongs to the patient, not to a table.

A **patient space** holds the patients that one key identifies: the organisation's space for
its private uploads (ids keyed by a PRF under the space's secret,
``app.datasets.patients.patient_index``); a generator seed's space (``source_key``
"synthetic:<seed>": patient i is row i of every generator dataset of that seed, whatever its shift
or size, keyed the same way, ``app.datasets.patients.generator_space``); or, left by migration 0019
until its patients are keyed into the organisation's space
(``app.datasets.patients.legacy_spaces``), one dataset's own space from before spaces, which takes
no release (``check_keyed``). The space holds the per-patient budget (epsilon, delta) and its Rényi
filter's fixed order.

A **block** is the set of a space's patients that are in exactly the same datasets (its
``datasets``, sorted ids); only its size is stored. Every release on dataset D charges every
patient in D, so a block's spend is the composition of the charged releases on its datasets,
and admitting a release on D checks, with the space's filter, every live block that contains
D (Feldman and Zrnic 2021 apply the same filter per individual; patients of one block have
identical histories, so one check per block is the check per patient). The cost grows with the
number of distinct membership patterns, not with patients.

Blocks are never edited: an upload that splits a block closes it (``closed_at``) and opens its
parts, so the blocks over time are kept (reports show their spend as it grew). Block sizes are
exact counts about private data: only data stewards read them.

Locking: admission on any dataset of a space takes the space's row lock first (an UPDATE of
``patient_space.version``), then the dataset's (``app.ledger.service.lock_dataset``), and an
upload that changes the blocks takes the same space lock; so admissions and block changes of
one space are serialised on SQLite and PostgreSQL alike.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, NamedTuple

from sqlalchemy import (
    JSON,
    ColumnElement,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Table,
    Text,
    cast,
    select,
    true,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, Session, mapped_column, undefer

from app.core.database import Base
from app.core.time import utcnow
from app.core.vocabulary import StrEnumColumn
from app.ledger import block_rows
from app.ledger.block_rows import Opened
from app.ledger.errors import PatientIdsRequired
from app.ledger.models import GENESIS_HASH
from app.privacy.filter import RenyiFilter, filter_order


class SpaceKind(StrEnum):
    ORGANISATION = "organisation"
    """The organisation's private uploads: ids keyed into one space."""
    GENERATOR = "generator"
    """A generator seed's patients: row i of each generator dataset of the seed is patient i."""
    DATASET = "dataset"
    """One dataset's own patients, from before spaces: no key finds them in another table."""


class PatientSpace(Base):
    __tablename__ = "patient_space"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[SpaceKind] = mapped_column(StrEnumColumn(SpaceKind, 16))
    # The PRF key of the organisation's patient ids (hex): server-side only, never served.
    secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    budget_epsilon: Mapped[float] = mapped_column(Float)
    budget_delta: Mapped[float] = mapped_column(Float)
    filter_order: Mapped[float] = mapped_column(Float)
    # Bumped by every admission and block change: the UPDATE is the space's row lock.
    version: Mapped[int] = mapped_column(Integer, default=0)
    # The patient index (app.datasets.patients.patient_index): its file's SHA-256 and its rows.
    index_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    index_rows: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The head (seq, hash) of the space's budget chain (app.ledger.space_chain), moved under
    # the space lock: a chain that ends before it shows that trailing records were deleted.
    chain_head_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    chain_head_hash: Mapped[str] = mapped_column(String(64), default=GENESIS_HASH,
                                                 server_default=GENESIS_HASH)
    # What the space's patients are rows of, where that is not the organisation's ids: a
    # generator seed ("synthetic:<seed>"), so every dataset of the seed finds its one space.
    # Deferred: loaded only where read, so a space row still reads at earlier revisions.
    source_key: Mapped[str | None] = mapped_column(String(64), nullable=True, unique=True,
                                                   index=True, deferred=True)
    # The scheme that digests the space's ids under its secret (app.datasets.record_coins),
    # recorded when the space is made and never changed: every table keyed into the space is
    # keyed the same way, so a newer scheme cannot split its patients. Null: it keys no ids.
    id_scheme: Mapped[str | None] = mapped_column(String(16), nullable=True, deferred=True)

    @property
    def guard(self) -> RenyiFilter:
        """The per-patient filter: the space's budget at its fixed order."""
        return RenyiFilter(self.budget_epsilon, self.budget_delta, self.filter_order)


class PatientBlock(Base):
    __tablename__ = "patient_block"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    space_id: Mapped[int] = mapped_column(ForeignKey("patient_space.id"), index=True)
    datasets: Mapped[list[int]] = mapped_column(JSON)  # sorted dataset ids
    size: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


def new_space(*, session: Session, kind: SpaceKind, epsilon: float, delta: float,
              secret: str | None = None, id_scheme: str | None = None,
              source_key: str | None = None) -> PatientSpace:
    """A space with its budget and the filter order fixed from it, once (``filter_order``);
    one that keys ids (``secret``) records the scheme that keys them (``id_scheme``).

    Raises:
        ValueError: a secret without its scheme, or a scheme without a secret.
    """
    if (secret is None) != (id_scheme is None):
        raise ValueError("a space that keys ids records its secret and its id scheme together")
    space = PatientSpace(kind=kind, secret=secret, budget_epsilon=epsilon, budget_delta=delta,
                         filter_order=filter_order(epsilon, delta), version=0, index_rows=0,
                         source_key=source_key, id_scheme=id_scheme)
    session.add(space)
    session.flush()
    return space


def by_source(*, session: Session, source_key: str) -> PatientSpace | None:
    """The space whose patients are the rows of ``source_key`` (None: not made yet)."""
    return session.scalars(select(PatientSpace).where(
        PatientSpace.source_key == source_key)).first()


def check_keyed(*, session: Session, space_id: int | None, dataset_id: int) -> None:
    """Admit a release on ``dataset_id`` only where a key finds its patients in other tables:
    not in a space of its own, where migration 0019's other datasets stay only until the
    service starts (``app.flows.patient_spaces``), and an upload whose rows declare no ids
    for good. Called under the dataset lock, before admission; the answer depends on this
    dataset alone.

    Raises:
        PatientIdsRequired: the dataset is in a space of its own (409).
    """
    space = None if space_id is None else session.get(PatientSpace, space_id)
    if space is None or space.kind != SpaceKind.DATASET:
        return
    raise PatientIdsRequired(
        f"dataset {dataset_id} was registered before patient spaces and its patients are not "
        "in the organisation's patient space (its rows declare no patient id column, or they "
        "could not be read back when the service started): another table's spend on them "
        "cannot be found, so a release on it could give them a second budget. A data steward "
        "must declare the patient ids of its rows before its next release: "
        f"PUT /v1/datasets/{dataset_id}/patient-ids with a CSV of one column (a header row, "
        "then each stored row's patient id, in order); its patients then join the "
        "organisation's space with the spend they had", field="dataset_id")


def organisation(*, session: Session) -> PatientSpace:
    """The organisation's space (created by migration 0019): every private upload joins it."""
    space = session.scalars(select(PatientSpace).where(
        PatientSpace.kind == SpaceKind.ORGANISATION).order_by(PatientSpace.id).limit(1)).first()
    if space is None:
        raise LookupError("the organisation's patient space is missing (migration 0019)")
    return space


def lock_space(*, session: Session, space_id: int) -> PatientSpace:
    """Serialise admissions and block changes of the space until the transaction ends; the
    space as read after the lock was taken."""
    session.execute(update(PatientSpace).where(PatientSpace.id == space_id)
                    .values(version=PatientSpace.version + 1)
                    .execution_options(synchronize_session=False))
    space = session.get(PatientSpace, space_id, populate_existing=True,
                        options=[undefer(PatientSpace.id_scheme)])
    if space is None:
        raise LookupError(f"no patient space {space_id}")
    return space


def _live(space_id: int) -> tuple[ColumnElement[bool], ...]:
    return (PatientBlock.space_id == space_id, PatientBlock.closed_at.is_(None),
            PatientBlock.size > 0)


def live_blocks(*, session: Session, space_id: int) -> list[PatientBlock]:
    """The space's current blocks (not closed, not empty), oldest first."""
    return list(session.scalars(
        select(PatientBlock).where(*_live(space_id)).order_by(PatientBlock.id)))


def _holds(session: Session, dataset_id: int) -> ColumnElement[bool]:
    """SQL: the block's ``datasets`` may hold ``dataset_id``. Filtered by the database, since a
    space has thousands of live blocks and an admission reads only its dataset's
    (``bench/patient_budget.py``); callers check the lists again, so on SQLite a substring of
    the stored JSON text does (a superset: "3" is in "[13]" too; half the time of
    ``json_each`` over every live block)."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return cast(PatientBlock.datasets, JSONB).contains([dataset_id])
    if dialect == "sqlite":
        return type_coerce(PatientBlock.datasets, String).contains(str(int(dataset_id)))
    return true()


def blocks_of(*, session: Session, space_id: int, dataset_id: int) -> list[PatientBlock]:
    """The live blocks whose patients are in ``dataset_id``: those a release on it charges."""
    found = session.scalars(select(PatientBlock).where(*_live(space_id),
                                                       _holds(session, dataset_id))
                            .order_by(PatientBlock.id))
    return [b for b in found if dataset_id in b.datasets]


def patterns_of(*, session: Session, space_id: int,
                dataset_id: int) -> set[tuple[int, ...]]:
    """The dataset lists of ``blocks_of``, each once: all that admission reads of them (the
    patients of two blocks with the same datasets have spent the same)."""
    if session.get_bind().dialect.name == "sqlite":  # the JSON texts parsed in one call
        texts = session.scalars(select(type_coerce(PatientBlock.datasets, String))
                                .where(*_live(space_id), _holds(session, dataset_id)))
        found = json.loads(f"[{','.join(texts)}]")
    else:
        found = session.scalars(select(PatientBlock.datasets).where(
            *_live(space_id), _holds(session, dataset_id))).all()
    return {tuple(datasets) for datasets in found if dataset_id in datasets}


def open_block(*, session: Session, space_id: int, datasets: Iterable[int],
               size: int) -> PatientBlock:
    """A dataset's own block; the caller chains it (``space_chain.append_opened``)."""
    block = PatientBlock(space_id=space_id, datasets=sorted(set(datasets)), size=int(size))
    session.add(block)
    return block


def close_blocks(*, session: Session, space_id: int, block_ids: list[int]) -> None:
    """Close live blocks of a dataset's own space once its patients are keyed into another;
    the caller holds the space lock and chains the change (``space_chain.append_closed``).

    Raises:
        ValueError: a block is not a live block of this space (nothing is written).
    """
    stray = sorted(set(block_ids) - {b.id for b in live_blocks(session=session,
                                                                space_id=space_id)})
    if stray:
        raise ValueError(f"blocks {stray} are not live blocks of space {space_id}")
    block_rows.close(session, _table(), sorted(block_ids), utcnow())


class BlockChange(NamedTuple):
    """How an upload of ``dataset_id`` splits one live block: ``joined`` of its patients are in
    the new dataset (they move to the block with it added), the rest stay (a tuple: an upload
    makes one per block it splits, thousands)."""

    block_id: int
    joined: int


@dataclass(frozen=True)
class UploadBlocks:
    """Where an upload's patients now are: by each split block's id, the block of its patients
    that joined and of those that stayed (None: none stayed); ``fresh``, the block of the
    patients first seen in this upload (None: none was); ``closed`` and ``opened`` (id,
    datasets, size), what the space's chain records (``space_chain.append_upload``)."""

    joined: dict[int, int]
    stayed: dict[int, int | None]
    fresh: int | None
    closed: list[int]
    opened: list[tuple[int, list[int], int]]


LiveBlocks = dict[int, tuple[list[int], int]]
"""A space's live blocks: by id, their datasets (sorted, distinct) and size."""


def live_block_lists(*, session: Session, space_id: int) -> LiveBlocks:
    """The live blocks' datasets and sizes, read once per upload (columns, not objects: a
    space may have thousands; their ``datasets`` decoded in one JSON parse, ``_json_lists``;
    through the session's connection, not the ORM's result machinery, which would more than
    double the read in the accept that runs alone after an upload's rows are read)."""
    session.flush()  # the connection sees no pending change the ORM's execute would flush
    rows = session.connection().execute(
        select(PatientBlock.id, type_coerce(PatientBlock.datasets, Text), PatientBlock.size)
        .where(*_live(space_id))).all()
    found: LiveBlocks = {}
    for (block, _, size), datasets in zip(rows, _json_lists([d for _, d, _ in rows]),
                                          strict=True):
        found[block] = (sorted(set(datasets)), size)  # as every writer stores them
    return found


def _json_lists(values: list[Any]) -> list[list[int]]:
    """JSON arrays as stored (SQLite: text) decoded in one parse of them joined, not one
    decode per row; values the driver already decoded (psycopg's json) as they are.

    Raises:
        ValueError: a value is not one JSON array (the joined parse would not line up).
    """
    if not all(isinstance(value, str) for value in values):
        return [json.loads(v) if isinstance(v, str) else v for v in values]
    decoded = json.loads("[" + ",".join(values) + "]") if values else []
    if len(decoded) != len(values) or not all(isinstance(d, list) for d in decoded):
        raise ValueError("a block's datasets are not one JSON array")
    return decoded


def apply_upload(*, session: Session, space: PatientSpace, dataset_id: int,
                 changes: list[BlockChange], new_patients: int,
                 live: LiveBlocks | None = None) -> UploadBlocks:
    """Close every block the upload splits and open its parts; open the block of patients
    seen first in this upload. The caller holds the space lock and chains the answer
    (``space_chain.append_upload``: that module imports this one). ``live``: the space's
    live blocks under that lock (``live_block_lists``; read if not given).

    Raises:
        ValueError: a change names a block that is not live in this space, or more patients
            than it has (the index and the blocks disagree: nothing is written).
    """
    now = utcnow()
    if live is None:
        live = live_block_lists(session=session, space_id=space.id)
    for change in changes:
        if change.block_id not in live:
            raise ValueError(f"block {change.block_id} is not a live block of space {space.id}")
        if not 0 < change.joined <= live[change.block_id][1]:
            raise ValueError(f"block {change.block_id} of {live[change.block_id][1]} patients "
                             f"cannot give {change.joined}")
    opened: list[Opened] = []  # every change checked, then all written
    for change in changes:
        stays, size = live[change.block_id]
        opened.append((_with(stays, dataset_id), change.joined))
        if change.joined < size:
            opened.append((stays, size - change.joined))
    if new_patients:
        opened.append(([dataset_id], new_patients))
    inserted = block_rows.insert_opened(session, _table(), space.id, opened, now)
    ids = iter(inserted)
    joined: dict[int, int] = {}
    stayed: dict[int, int | None] = {}
    for change in changes:
        joined[change.block_id] = next(ids)
        stayed[change.block_id] = next(ids) if change.joined < live[change.block_id][1] else None
    fresh = next(ids) if new_patients else None
    closed = [change.block_id for change in changes]
    block_rows.close(session, _table(), closed, now)
    return UploadBlocks(joined, stayed, fresh, closed,
                        [(block, datasets, size)
                         for block, (datasets, size) in zip(inserted, opened, strict=True)])


def _table() -> Table:
    table = PatientBlock.__table__
    assert isinstance(table, Table)
    return table


def _with(datasets: list[int], dataset_id: int) -> list[int]:
    """Sorted, distinct ``datasets`` with ``dataset_id`` added (an upload's dataset is most
    often the newest: appended, not sorted again)."""
    if not datasets or dataset_id > datasets[-1]:
        return [*datasets, dataset_id]
    return sorted({*datasets, dataset_id})
