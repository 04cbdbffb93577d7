"""A dataset's rows as statistics read them: every record, column by column.

Which rows. A cohort question (how many patients, how many crises) is about the whole dataset,
so a release reads all of its records: training, calibration and evaluation parts alike. That
is sound because a statistics release is charged in the ledger as a mechanism of its own,
composed *sequentially* (by the Rényi filter) with every job and every other release. It does
not touch the parallel composition a job relies on: a job's calibration and evaluation releases
are dominated by the job's own training charge on disjoint parts (``app.privacy.parallel``),
whatever else the ledger holds. A statistic restricted to one part would save nothing, since
the filter composes it with everything anyway.

The rows come from the generator's seed (synthetic) or the stored Parquet table (upload).
Regenerating a million synthetic rows takes about half a second, so the last few cohorts are
kept in memory for a few minutes, keyed by everything that identifies their rows; a dataset
that is no longer ready is forgotten (``forget``) and never read.
"""

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from app.datasets import parts, record_coins, synthetic, union
from app.datasets.intake import stored
from app.datasets.models import Dataset
from app.datasets.patients import left_out_rows, patient_ids
from app.features import FEATURE_NAMES
from app.ledger.left_out import LeftOut

CACHE_ENTRIES = 2
CACHE_SECONDS = 300.0


@dataclass(frozen=True, eq=False)
class Cohort:
    """Every record's value of every declared column (categorical: category codes; the
    outcome: 1 for the event), as read-only float64 arrays of equal length."""

    columns: dict[str, np.ndarray]
    rows: int
    ids: pa.Array | pa.ChunkedArray  # each record's id (the generator's: its row number)

    def reading(self, dataset: Dataset, left: LeftOut | None) -> "Cohort":
        """The records a release that left ``left`` out reads (all of them when None)."""
        if left is None:
            return self
        read = left_out_rows.read_rows(dataset, self.ids, left)
        return _frozen({name: values[read] for name, values in self.columns.items()},
                       self.ids.filter(pa.array(read)))


def _frozen(columns: dict[str, np.ndarray], ids: pa.Array | pa.ChunkedArray) -> Cohort:
    arrays = {}
    for name, values in columns.items():
        array = np.ascontiguousarray(values, dtype=np.float64)
        array.setflags(write=False)
        arrays[name] = array
    rows = len(next(iter(arrays.values()))) if arrays else 0
    return Cohort(arrays, rows, ids)


def _synthetic(dataset: Dataset) -> Cohort:
    schema = parts.schema_of(dataset)
    table = synthetic.generate(dataset.n_rows, dataset.seed, dataset.synthetic_shift)
    by_column = np.ascontiguousarray(table.x.T)  # one pass: each column contiguous
    columns = {name: by_column[j] for j, name in enumerate(FEATURE_NAMES)}
    columns |= {a.name: table.sex for a in schema.attributes}
    columns[schema.outcome.name] = table.y
    return _frozen(columns, record_coins.id_strings(range(dataset.n_rows)))


def _upload(dataset: Dataset) -> Cohort:
    schema = stored.schema_of(dataset)
    if dataset.union_of is not None:  # its ids are its members' patients' already
        table = union.load_table(dataset)
        patients = table.ids
    else:
        table = stored.load_table(dataset)
        patients = patient_ids.of(dataset, table.ids)
    by_column = np.ascontiguousarray(table.features.T)
    columns = {name: by_column[j] for j, name in enumerate(schema.feature_names)}
    columns |= dict(table.attributes)
    columns[schema.outcome.name] = table.outcome
    return _frozen(columns, patients)


_cache: OrderedDict[tuple[object, ...], tuple[float, Cohort]] = OrderedDict()
_lock = threading.Lock()


def _key(dataset: Dataset) -> tuple[object, ...]:
    return (dataset.id, dataset.source_kind, dataset.n_rows, dataset.seed, dataset.synthetic_shift,
            dataset.table_sha256, dataset.schema_hash)


def load(dataset: Dataset) -> Cohort:
    """The dataset's rows (the caller has checked it is ready)."""
    key, now = _key(dataset), time.monotonic()
    with _lock:
        cached = _cache.get(key)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            _cache.move_to_end(key)
            return cached[1]
    cohort = _synthetic(dataset) if dataset.source_kind == "synthetic" else _upload(dataset)
    with _lock:
        _cache[key] = (now, cohort)
        _cache.move_to_end(key)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)
    return cohort


def forget(dataset_id: int) -> None:
    """Drop the dataset's cached rows (its data were erased or are not there)."""
    with _lock:
        for key in [k for k in _cache if k[0] == dataset_id]:
            del _cache[key]


def clear() -> None:
    """Drop every cached cohort (benchmarks measure cold requests)."""
    with _lock:
        _cache.clear()
