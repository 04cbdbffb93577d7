"""Dataset table: what was registered and the privacy budget that guards it."""

from datetime import date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Boolean, Date, DateTime, Float, ForeignKey, Integer, String
from sqlalchemy import true as sa_true
from sqlalchemy.orm import Mapped, mapped_column

from app.core.database import Base
from app.core.time import utcnow
from app.core.vocabulary import StrEnumColumn
from app.datasets.record_coins import CURRENT_SCHEME
from app.ledger import spaces as _spaces  # noqa: F401  (patient_space: the FK's table)
from app.ledger.models import GENESIS_HASH


class DatasetState(StrEnum):
    """Where a dataset's rows are."""

    AWAITING_DATA = "awaiting_data"
    # An upload's body is arriving: the dataset is claimed for that one upload
    # (app.datasets.claims).
    RECEIVING = "receiving"
    READY = "ready"
    ERASED = "erased"
    # Deleted by its steward before any row arrived: gone from the API; its ledger (the budget
    # record) and audit events stay, append-only.
    WITHDRAWN = "withdrawn"


# The short names callers import (members, so equal to the strings they were).
AWAITING_DATA, RECEIVING = DatasetState.AWAITING_DATA, DatasetState.RECEIVING
READY, ERASED, WITHDRAWN = DatasetState.READY, DatasetState.ERASED, DatasetState.WITHDRAWN


class Dataset(Base):
    __tablename__ = "dataset"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    source_kind: Mapped[str] = mapped_column(String(32))
    n_rows: Mapped[int] = mapped_column(Integer)
    n_train: Mapped[int] = mapped_column(Integer)
    # Rows the per-record coins put in the calibration part; the rest of the held-out rows
    # are the evaluation part (app.datasets.patients.identity).
    n_calibration: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    seed: Mapped[int] = mapped_column(Integer)
    # The key of the per-record coins: server-side only, never served.
    record_secret: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # Which keyed function turns an id into its coin (app.datasets.record_coins); fixed for
    # the dataset's life, so its parts never move.
    coin_scheme: Mapped[str] = mapped_column(String(16), default=CURRENT_SCHEME,
                                             server_default="blake2b-v1")
    # The source's identity (app.datasets.patients.identity): one registration per population.
    source_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True,
                                                          unique=True, index=True)
    # A synthetic source's generated rows as an upload of them would be fingerprinted, so those
    # rows cannot come back as an upload under a budget of their own (null for uploads).
    content_fingerprint: Mapped[str | None] = mapped_column(String(64), nullable=True,
                                                           unique=True, index=True)
    public: Mapped[bool] = mapped_column(Boolean, default=False)
    budget_epsilon: Mapped[float | None] = mapped_column(Float, nullable=True)
    budget_delta: Mapped[float | None] = mapped_column(Float, nullable=True)
    # The patient space whose per-patient budget its releases also charge (app.ledger.spaces):
    # the organisation's for a private upload, its own for a generator; none when public.
    patient_space_id: Mapped[int | None] = mapped_column(
        ForeignKey("patient_space.id"), nullable=True, index=True)
    # The Rényi filter's order, fixed at registration from the budget (app.privacy.filter).
    filter_order: Mapped[float | None] = mapped_column(Float, nullable=True)
    # Bumped by every ledger write: the UPDATE is the row lock that serialises admissions.
    ledger_version: Mapped[int] = mapped_column(Integer, default=0)
    # The ledger chain's head (seq and hash of its last record), moved under that same lock:
    # a chain that ends before the head shows that trailing records were deleted.
    ledger_head_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    ledger_head_hash: Mapped[str] = mapped_column(
        String(64), default=GENESIS_HASH, server_default=GENESIS_HASH
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The declared schema (app.datasets.schema.dataset_schema) as JSON, and its hash; the synthetic
    # generator's is BUILT_IN_SCHEMA.
    schema_json: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    schema_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # awaiting_data (an upload registered, no rows yet) | receiving (one upload's body is
    # arriving) | ready | erased (rows and secret gone) | withdrawn (deleted before any row)
    state: Mapped[DatasetState] = mapped_column(StrEnumColumn(DatasetState, 16), default=READY,
                                                server_default=READY.value)
    # The upload that holds the dataset while its body arrives (app.datasets.claims), and when
    # it took it; both null outside ``receiving``. The process that took it (``host pid
    # boot``, app.datasets.claims.this_process): a start gives back a gone process's claim.
    upload_claim: Mapped[str | None] = mapped_column(String(64), nullable=True)
    upload_claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                              nullable=True)
    upload_claim_owner: Mapped[str | None] = mapped_column(String(300), nullable=True)
    # The stored table under DATA_DIR, named by its bytes' SHA-256 (app.datasets.intake.stored), its
    # media type (null: the service's own Parquet layout, before migration 0014) and the values
    # imputed per feature.
    table_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    table_media_type: Mapped[str | None] = mapped_column(String(64), nullable=True)
    imputed: Mapped[dict[str, int] | None] = mapped_column(JSON, nullable=True)
    # The uploaded file's columns its schema ignores (names from the header: no data).
    ignored_columns: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # An upload's patients against the organisation's earlier tables (patient_index.Overlap:
    # patients, already_known, new, shared_with), and the earlier dataset whose rows its rows
    # equal (they share their patients' spend): exact intake facts, for the tables' holders.
    patient_overlap: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    rows_equal_dataset_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Patient ids its steward declared for rows received without them (a file named by its
    # SHA-256 beside the table: app.datasets.patients.patient_ids); null: the table's own ids.
    patient_ids_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    data_erased_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                           nullable=True)
    # A follow-up cohort: a later table of the model's declared schema on which monitoring
    # runs measure it (app.monitoring), and the period its rows cover (public by declaration).
    # The generator's documented shift (app.datasets.synthetic.SHIFTS), null: none.
    synthetic_shift: Mapped[str | None] = mapped_column(String(32), nullable=True)
    follow_up_model_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    follow_up_period_start: Mapped[date | None] = mapped_column(Date, nullable=True)
    follow_up_period_end: Mapped[date | None] = mapped_column(Date, nullable=True)
    # False: an unlabelled follow-up (features only, migration 0023): its table has no outcome
    # column, so nothing trains on it, evaluates on it or queries its outcome
    # (``app.datasets.schema.labels``); monitoring measures its data drift only.
    labelled: Mapped[bool] = mapped_column(Boolean, default=True, server_default=sa_true())
    # A declared union of earlier cohorts of one schema (source_kind "union", migration
    # 0024): its members in the order declared (``app.datasets.union``); null otherwise.
    union_of: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)

    @property
    def n_holdout(self) -> int:
        return self.n_rows - self.n_train

    @property
    def n_evaluation(self) -> int:
        return self.n_holdout - self.n_calibration


class UploadState(StrEnum):
    """Where an upload's spooled body is: waiting for a worker, read by one, or done."""

    QUEUED = "queued"
    INGESTING = "ingesting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class Upload(Base):
    """An upload's body, spooled by the API and ingested by a worker (``app.flows.upload``).

    The dataset stays ``receiving`` under the upload's claim token until the ingest makes it
    ``ready`` or gives it back; ``problem`` is the problem+json a failed ingest answers.
    """

    __tablename__ = "upload"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("dataset.id"), index=True)
    state: Mapped[UploadState] = mapped_column(StrEnumColumn(UploadState, 16), index=True)
    claim: Mapped[str] = mapped_column(String(64))  # the dataset's upload claim token
    spool_path: Mapped[str] = mapped_column(String(1024))
    sha256: Mapped[str] = mapped_column(String(64))
    media_type: Mapped[str] = mapped_column(String(200))  # as sent, with its CSV dialect
    size_bytes: Mapped[int] = mapped_column(Integer)
    # Who sent it (``Principal``'s fields, never a key): the ingest's audit event names them.
    sent_by: Mapped[dict[str, Any]] = mapped_column(JSON)
    problem: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    worker_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
