"""An upload's stored table, read back exactly as it was accepted.

A table kept as sent (``dataset.table_media_type`` set, migration 0014) is read through the
same validation that accepted it (``app.datasets.intake.ingest.ingest_file``): the same values, the
same imputations, the same ids. Two checks tie what is read to what was accepted: the file's
bytes must match its name (the SHA-256 recorded with the dataset), and the rows' content
fingerprint must be the source identity the dataset was registered under, so a table that
would now read differently (an edited file, a rule that changed) is refused rather than
trained on. Tables stored before 0014 are in the service's own Parquet layout
(``table_store.load``). A CSV accepted in another dialect than comma-separated with decimal
points (``text/csv; delimiter=";"; decimal=","``) is read back in that dialect, which its
file's name records (``app.datasets.intake.table_format``): ``table_media_type`` stays ``text/csv``.
"""

from pathlib import Path

from app.core.settings import settings
from app.datasets.intake import ingest, table_format, table_store
from app.datasets.models import Dataset
from app.datasets.rules import source_identity
from app.datasets.schema import labels
from app.datasets.schema.dataset_schema import DatasetSchema, FeaturesOnly


class StoredTableMismatch(ValueError):
    """The stored table does not read back as the rows that were accepted."""


def schema_of(dataset: Dataset) -> DatasetSchema:
    return DatasetSchema.model_validate(dataset.schema_json)


def table_schema(dataset: Dataset) -> DatasetSchema:
    """The declaration its table is read under: ``FeaturesOnly`` for an unlabelled follow-up
    (no outcome column), else the declaration itself."""
    reading = FeaturesOnly if labels.unlabelled(dataset) else DatasetSchema
    return reading.model_validate(dataset.schema_json)


def table_path(dataset: Dataset) -> Path:
    """Where the dataset's table is (or was, once erased): named by its bytes' SHA-256."""
    assert dataset.table_sha256 is not None
    media = dataset.table_media_type
    if media != table_format.CSV:
        return settings.data_dir / f"{dataset.table_sha256}.parquet"
    paths = [settings.data_dir / f"{dataset.table_sha256}{suffix}"
             for suffix in table_format.csv_suffixes()]
    return next((path for path in paths if path.exists()), paths[0])


def load_table(dataset: Dataset) -> table_store.IngestedTable:
    """The upload's rows, as ingestion returned them when they were accepted.

    Raises:
        StoredTableMismatch: the file was edited, or its rows no longer read as accepted.
    """
    path, schema = table_path(dataset), table_schema(dataset)
    if dataset.table_media_type is None:
        return table_store.load(path, schema=schema)
    try:
        table_store.verify_bytes(path)
    except ValueError as exc:
        raise StoredTableMismatch(str(exc)) from None
    table = ingest.ingest_file(path, media_type=table_format.format_of(path), schema=schema)
    if source_identity(dataset, table.fingerprint) != dataset.source_fingerprint:
        raise StoredTableMismatch(
            f"{path.name} no longer reads as the rows dataset {dataset.id} accepted")
    return table
