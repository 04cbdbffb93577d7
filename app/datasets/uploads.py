"""A clinic's own table: its rows arrive (all or nothing), are split by patient, and can be erased.

An upload runs in three steps: ``claims.claim`` takes the dataset for this one upload (a short
transaction of its own) before the API spools its body; a worker then runs ``receive``, which
validates the spooled table against the dataset's declared schema (``app.datasets.intake.ingest``)
with no session held, and ``accept``, which, in one short transaction,
checks the size-dependent rules (delta at most 1/(10 n)) and the data identity (the same rows,
in any order, cannot be registered twice where that would be a second budget; a private upload
whose rows equal an earlier one's in the organisation's patient space shares its patients'
spend instead, and its steward is told: ``rules.check_new_source``), keeps the file as sent,
named by its bytes' SHA-256, and counts the parts by the record secret drawn for it. Nothing is
stored when any check fails, and the claim is given back (``claims.give_back``). ``erase_data``
removes the rows and the secret; the ledger, the models and the reports stay, and the
fingerprint and the patient index stay too, so erased data cannot come back under a fresh
budget.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy import event, select
from sqlalchemy.orm import Session

from app.core.settings import settings
from app.core.time import utcnow
from app.datasets import claims, record_coins
from app.datasets.claims import ClaimedUpload
from app.datasets.intake.ingest import MediaType, PendingUpload, ingest_and_store
from app.datasets.intake.stored import table_path
from app.datasets.intake.table_readers import Source
from app.datasets.models import ERASED, READY, Dataset
from app.datasets.patients import identity
from app.datasets.rules import (
    check_delta,
    check_new_source,
    source_identity,
    upload_fingerprint,
)
from app.ledger import spaces


@dataclass(frozen=True)
class ReceivedUpload:
    """A table read and checked against the schema, not yet kept: its record secret, drawn
    before the ids were keyed, travels with it."""

    claimed: ClaimedUpload
    upload: PendingUpload
    secret: str
    parts: dict[identity.Part, int]  # rows per part, counted as the ids were keyed


def receive(*, claimed: ClaimedUpload, path: Source, media_type: MediaType,
            sha256: str | None = None) -> ReceivedUpload:
    """Validate the spooled table at ``path`` (whose bytes hash to ``sha256``) against the
    claimed dataset's schema; no session.

    Raises:
        TableInvalid: the table breaks the schema (422, nothing stored).
        InvalidRequest: the budget's delta is above 1/(10 n) for this many rows (422).
    """
    secret, patient_secret = identity.new_secret(), claimed.patient_secret
    patient_scheme = claimed.patient_scheme  # the space's, set with its secret
    tally = identity.PartTally(secret, claimed.coin_scheme)
    upload = ingest_and_store(  # the keyed words find duplicate ids, then give the parts
        path, media_type=media_type, schema=claimed.schema, data_dir=settings.data_dir,
        sha256=sha256, id_digest=tally,
        patient_digest=None if patient_secret is None or patient_scheme is None
        else lambda ids: record_coins.keyed_words(
            ids, patient_secret, scheme=patient_scheme))
    if claimed.budget_delta is not None:
        check_delta(claimed.budget_delta, upload.n_rows, field="privacy_budget.delta")
    return ReceivedUpload(claimed, upload, secret, tally.counts_of(upload.id_words))


def accept(*, session: Session, received: ReceivedUpload) -> Dataset:
    """Keep a received table and make its dataset ``ready``, in the caller's transaction.

    Raises:
        UploadInProgress: the claim expired and was taken over (409, nothing stored).
        DatasetAlreadyRegistered: the same rows are registered as another dataset, where
            that would be a second budget (409; see ``rules.check_new_source``).
    """
    space_id = session.scalar(select(Dataset.patient_space_id)
                              .where(Dataset.id == received.claimed.dataset_id))
    keyed = None  # the organisation's space, where a re-upload shares its patients' spend
    if space_id is not None:  # the space's lock before the dataset's, as every admission;
        # the flow then keys the patients into the space (``patient_index.add_dataset``)
        space = spaces.lock_space(session=session, space_id=space_id)
        check_delta(space.budget_delta, received.upload.n_rows,
                    field="the organisation's per-patient delta")
        keyed = space.id if space.kind == spaces.SpaceKind.ORGANISATION else None
    dataset = claims.hold(session=session, claimed=received.claimed)
    upload = received.upload
    dataset.rows_equal_dataset_id = check_new_source(
        session, upload_fingerprint(upload.fingerprint), patient_space_id=keyed)
    _keep_before_commit(session, upload)  # the file as sent, named by its bytes
    counts = received.parts
    dataset.n_rows = upload.n_rows
    dataset.n_train = counts[identity.Part.TRAIN]
    dataset.n_calibration = counts[identity.Part.CALIBRATION]
    dataset.record_secret = received.secret
    dataset.source_fingerprint = source_identity(dataset, upload.fingerprint)
    dataset.table_sha256, dataset.imputed = upload.sha256, upload.imputed
    dataset.ignored_columns = list(upload.ignored) if upload.ignored else None
    dataset.table_media_type = upload.media_type
    dataset.state = READY
    session.flush()
    return dataset


_KEEPERS = ThreadPoolExecutor(2, thread_name_prefix="keep-table")


def _keep_before_commit(session: Session, upload: PendingUpload) -> None:
    """Keep the upload's file (copied or linked, flushed to disk, renamed) on a thread while
    the caller's transaction goes on (the patient index's work, ``app.flows.upload``), and
    make that transaction's commit wait for it: a row never names a file not yet kept, and a
    file that could not be kept fails the commit. A transaction rolled back after this leaves
    the file behind for the start-up sweep (``app.flows.sweep``), as a failure after the
    keep always did."""
    keeping = _KEEPERS.submit(upload.commit, link=True)  # a spool nobody writes again

    def kept(_: Session) -> None:
        keeping.result()

    event.listen(session, "before_commit", kept, once=True)


def erase_data(*, session: Session, dataset: Dataset) -> Dataset:
    """Remove the dataset's rows and record secret (idempotent); everything else stays."""
    if dataset.state == ERASED:
        return dataset
    if dataset.table_sha256 is not None and not _file_shared(session, dataset):
        table_path(dataset).unlink(missing_ok=True)
    dataset.record_secret, dataset.table_sha256 = None, None
    dataset.state, dataset.data_erased_at = ERASED, utcnow()
    session.flush()
    return dataset


def _file_shared(session: Session, dataset: Dataset) -> bool:
    """Whether another dataset keeps the same file (the same bytes uploaded twice into the
    organisation's space): erasing this one's rows leaves that one's (a file both erased
    leave behind is an orphan the start-up sweep removes, ``app.flows.sweep``)."""
    return session.scalar(select(Dataset.id).where(
        Dataset.table_sha256 == dataset.table_sha256, Dataset.id != dataset.id).limit(1)
    ) is not None
