"""A clinic's own table: its rows arrive (all or nothing), are split by patient, and can be erased.

``put_data`` validates an upload against the dataset's declared schema as its body arrives
(``app.datasets.ingest``), checks the size-dependent rules (delta at most 1/(10 n)) and the data
identity (the same rows, in any order, cannot be registered twice: one budget per data), then
keeps the file as sent, named by its bytes' SHA-256, and counts the parts by the record secret
drawn for it. Nothing is stored when any check fails. ``erase_data`` removes the rows and
the secret; the ledger, the models and the reports stay, and the fingerprint stays too, so
erased data cannot come back under a fresh budget.
"""

from sqlalchemy.orm import Session

from app.core.errors import Conflict
from app.core.settings import settings
from app.core.time import utcnow
from app.datasets import identity, record_coins
from app.datasets.ingest import ingest_and_store
from app.datasets.models import AWAITING_DATA, ERASED, READY, Dataset
from app.datasets.rules import check_delta, check_new_source, upload_fingerprint
from app.datasets.stored import schema_of, table_path
from app.datasets.table_readers import Source


class DatasetNotAwaitingData(Conflict):
    kind, title = "dataset-has-data", "The dataset is not waiting for data"


def put_data(*, session: Session, dataset: Dataset, path: Source, media_type: str) -> Dataset:
    """Validate, store and split an uploaded table; the dataset becomes ``ready``.

    ``path`` is a spooled file, or a body still arriving (``GrowingFile``: read as it comes).

    Raises:
        DatasetNotAwaitingData: not an upload, or it already has (or had) its rows (409).
        TableInvalid: the table breaks the schema (422, nothing stored).
        InvalidRequest: the budget's delta is above 1/(10 n) for this many rows (422).
        DatasetAlreadyRegistered: the same rows are registered as another dataset (409).
    """
    if dataset.source_kind != "upload" or dataset.state != AWAITING_DATA:
        raise DatasetNotAwaitingData(
            f"dataset {dataset.id} is {dataset.state} ({dataset.source_kind}): rows can be sent "
            "once, to an upload registered and still awaiting its data; register a new dataset "
            "for other rows", field="dataset_id", state=dataset.state,
        )
    schema = schema_of(dataset)
    secret = identity.new_secret()
    upload = ingest_and_store(  # the keyed words find duplicate ids, then give the parts
        path, media_type=media_type, schema=schema, data_dir=settings.data_dir,
        id_digest=lambda ids: record_coins.keyed_words(ids, secret, scheme=dataset.coin_scheme))
    if dataset.budget_delta is not None:
        check_delta(dataset.budget_delta, upload.n_rows, field="privacy_budget.delta")
    fingerprint = upload_fingerprint(upload.fingerprint)
    check_new_source(session, fingerprint)
    stored = upload.commit()  # the file as sent, named by its bytes
    counts = identity.part_counts(identity.parts_of_words(upload.id_words))
    dataset.n_rows = upload.n_rows
    dataset.n_train = counts[identity.Part.TRAIN]
    dataset.n_calibration = counts[identity.Part.CALIBRATION]
    dataset.record_secret, dataset.source_fingerprint = secret, fingerprint
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
