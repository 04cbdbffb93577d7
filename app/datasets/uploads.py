"""A clinic's own table: its rows arrive (all or nothing), are split by patient, and can be erased.

An upload runs in three steps so that no database connection is held while its body arrives:
``claims.claim`` takes the dataset for this one upload (a short transaction of its own);
``receive`` validates the table against the dataset's declared schema as the body arrives
(``app.datasets.ingest``), with no session at all; ``accept`` then, in one short transaction,
checks the size-dependent rules (delta at most 1/(10 n)) and the data identity (the same rows,
in any order, cannot be registered twice: one budget per data), keeps the file as sent, named by
its bytes' SHA-256, and counts the parts by the record secret drawn for it. Nothing is stored
when any check fails, and the claim is given back (``claims.give_back``). ``erase_data``
removes the rows and the secret; the ledger, the models and the reports stay, and the
fingerprint stays too, so erased data cannot come back under a fresh budget.
"""

from dataclasses import dataclass

from sqlalchemy.orm import Session

from app.core.settings import settings
from app.core.time import utcnow
from app.datasets import claims, identity, record_coins
from app.datasets.claims import ClaimedUpload
from app.datasets.ingest import MediaType, PendingUpload, ingest_and_store
from app.datasets.models import ERASED, READY, Dataset
from app.datasets.rules import check_delta, check_new_source, upload_fingerprint
from app.datasets.stored import table_path
from app.datasets.table_readers import Source


@dataclass(frozen=True)
class ReceivedUpload:
    """A table read and checked against the schema, not yet kept: its record secret, drawn
    before the ids were keyed, travels with it."""

    claimed: ClaimedUpload
    upload: PendingUpload
    secret: str


def receive(*, claimed: ClaimedUpload, path: Source, media_type: MediaType) -> ReceivedUpload:
    """Validate the table at ``path`` (a spooled file, or a body still arriving: a
    ``GrowingFile`` is read as it comes) against the claimed dataset's schema; no session.

    Raises:
        TableInvalid: the table breaks the schema (422, nothing stored).
        InvalidRequest: the budget's delta is above 1/(10 n) for this many rows (422).
    """
    secret = identity.new_secret()
    upload = ingest_and_store(  # the keyed words find duplicate ids, then give the parts
        path, media_type=media_type, schema=claimed.schema, data_dir=settings.data_dir,
        id_digest=lambda ids: record_coins.keyed_words(ids, secret, scheme=claimed.coin_scheme))
    if claimed.budget_delta is not None:
        check_delta(claimed.budget_delta, upload.n_rows, field="privacy_budget.delta")
    return ReceivedUpload(claimed, upload, secret)


def accept(*, session: Session, received: ReceivedUpload) -> Dataset:
    """Keep a received table and make its dataset ``ready``, in the caller's transaction.

    Raises:
        UploadInProgress: the claim expired and was taken over (409, nothing stored).
        DatasetAlreadyRegistered: the same rows are registered as another dataset (409).
    """
    dataset = claims.hold(session=session, claimed=received.claimed)
    upload = received.upload
    fingerprint = upload_fingerprint(upload.fingerprint)
    check_new_source(session, fingerprint)
    stored = upload.commit()  # the file as sent, named by its bytes
    counts = identity.part_counts(identity.parts_of_words(upload.id_words))
    dataset.n_rows = upload.n_rows
    dataset.n_train = counts[identity.Part.TRAIN]
    dataset.n_calibration = counts[identity.Part.CALIBRATION]
    dataset.record_secret, dataset.source_fingerprint = received.secret, fingerprint
    dataset.table_sha256, dataset.imputed = stored.sha256, upload.imputed
    dataset.table_media_type = upload.media_type
    dataset.state = READY
    session.flush()
    return dataset


def erase_data(*, session: Session, dataset: Dataset) -> Dataset:
    """Remove the dataset's rows and record secret (idempotent); everything else stays."""
    if dataset.state == ERASED:
        return dataset
    if dataset.table_sha256 is not None:
        table_path(dataset).unlink(missing_ok=True)
    dataset.record_secret, dataset.table_sha256 = None, None
    dataset.state, dataset.data_erased_at = ERASED, utcnow()
    session.flush()
    return dataset
