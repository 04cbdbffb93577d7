"""A dataset's rows by part: training, calibration, evaluation (each record's keyed coin).

The synthetic generator's rows are regenerated from its seed (ids are row indices); an upload's
are read from its stored table (ids from its id column), a union's from its members' tables
(``app.datasets.union``). Either way the part of a record is a
keyed PRF of its id under the dataset's secret (``app.datasets.patients.identity``).
"""

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from app.core.errors import Conflict
from app.datasets import record_coins, synthetic, union
from app.datasets.intake import table_store
from app.datasets.intake.stored import load_table, schema_of
from app.datasets.models import Dataset
from app.datasets.patients import identity, left_out_rows, patient_ids
from app.datasets.schema.dataset_schema import DatasetSchema
from app.ledger.left_out import LeftOut


class DatasetWithoutIdentity(Conflict):
    kind, title = "dataset-without-identity", "Dataset has no record secret"


Groups = dict[str, tuple[np.ndarray, list[str]]]


@dataclass(frozen=True)
class PartRows:
    """One part's rows: raw features, outcomes, and subgroup codes with their public labels.

    ``rows`` is the part's size in the whole dataset, which is public (row counts are, by
    convention): what every decision and every figure that leaves the service reads. The
    arrays may hold fewer, when the release leaves patients out (``app.ledger.left_out``):
    how many is private, and is never read from their length.
    """

    x: np.ndarray
    y: np.ndarray
    groups: Groups
    rows: int


@dataclass(frozen=True)
class Split:
    train: PartRows
    calibration: PartRows
    evaluation: PartRows


def load_parts(dataset: Dataset, left: LeftOut | None = None) -> Split:
    """The dataset's rows in raw feature units, by part (each record's keyed coin of its id),
    without the patients the release left out (``left``; None: every row).

    Raises:
        DatasetWithoutIdentity: the dataset has no record secret (its data were erased or
            have not arrived).
    """
    secret = dataset.record_secret
    if secret is None:
        raise DatasetWithoutIdentity(
            f"dataset {dataset.id} is {dataset.state}: it has no rows to split",
            field="dataset_id", state=dataset.state,
        )
    if dataset.source_kind in ("upload", union.UNION):
        return _upload_parts(dataset, secret, left)
    return _synthetic_parts(dataset, secret, left)


def _public_sizes(dataset: Dataset) -> dict[identity.Part, int]:
    """Each part's public size: the dataset's, as registered (a union's are its members'
    summed: ``app.datasets.union``)."""
    return {identity.Part.TRAIN: dataset.n_train,
            identity.Part.CALIBRATION: dataset.n_calibration,
            identity.Part.EVALUATION: dataset.n_evaluation}


def _read(dataset: Dataset, ids: pa.Array | pa.ChunkedArray, parts: np.ndarray,
          left: LeftOut | None) -> np.ndarray:
    """Each row's part, or -1 (no part) for a row whose patient the release left out."""
    if left is None:
        return parts
    return np.where(left_out_rows.read_rows(dataset, ids, left), parts, -1)


def _synthetic_parts(dataset: Dataset, secret: str, left: LeftOut | None) -> Split:
    table = synthetic.generate(dataset.n_rows, dataset.seed, dataset.synthetic_shift)
    parts = identity.parts_of(range(dataset.n_rows), secret, scheme=dataset.coin_scheme)
    counts = _public_sizes(dataset)
    read = _read(dataset, record_coins.id_strings(range(dataset.n_rows)), parts, left)

    def rows(part: identity.Part) -> PartRows:
        member = read == part
        return PartRows(table.x[member], table.y[member],
                        synthetic.subgroups(table.x[member], table.sex[member]), counts[part])

    return Split(rows(identity.Part.TRAIN), rows(identity.Part.CALIBRATION),
                 rows(identity.Part.EVALUATION))


def _groups(schema: DatasetSchema, table: table_store.IngestedTable, member: np.ndarray) -> Groups:
    """The declared subgroups (binary or categorical features, attributes) with public labels."""
    groups: Groups = {}
    features = {f.name: (i, f) for i, f in enumerate(schema.features)}
    attributes = {a.name: a for a in schema.attributes}
    for name in schema.subgroups:
        if name in attributes:
            groups[name] = (table.attributes[name][member], list(attributes[name].categories))
        else:
            index, spec = features[name]
            labels = list(spec.categories) if spec.categories else ["0", "1"]
            groups[name] = (table.features[member, index].astype(np.int64), labels)
    return groups


def _upload_parts(dataset: Dataset, secret: str, left: LeftOut | None) -> Split:
    schema = schema_of(dataset)
    if dataset.union_of is not None:  # each row in its member's part, ids its patients'
        table, parts = union.load_with_parts(dataset)
        patients = table.ids
    else:
        table = load_table(dataset)
        parts = identity.parts_of(table.ids, secret, scheme=dataset.coin_scheme)
        patients = patient_ids.of(dataset, table.ids)
    counts = _public_sizes(dataset)
    read = _read(dataset, patients, parts, left)

    def rows(part: identity.Part) -> PartRows:
        member = read == part
        return PartRows(table.features[member], table.outcome[member],
                        _groups(schema, table, member), counts[part])

    return Split(rows(identity.Part.TRAIN), rows(identity.Part.CALIBRATION),
                 rows(identity.Part.EVALUATION))
