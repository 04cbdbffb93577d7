"""The per-value rules of an uploaded table, applied one batch at a time, vectorised.

Every rule is counted exactly (a vectorised count costs nothing next to parsing), but only the
first ``MAX_ERRORS`` errors in reading order are kept with their row, so a table of two million
bad rows answers with a short, readable list and the true total.

Row numbers are 1-based data rows (the header is not counted). A CSV line that does not parse
(wrong number of fields) is dropped by the reader and recorded in ``BatchRows.skipped``, so the
rows after it keep their true numbers.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.datasets.dataset_schema import Attribute, DatasetSchema, FeatureKind, FeatureSpec

MAX_ERRORS = 100
MAX_ID_CHARS = 128  # as a risk batch's patient id
_NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
_NOT_FINITE = r"^\s*[+-]?([Nn][Aa][Nn]|[Ii][Nn][Ff]|[Ii][Nn][Ff][Ii][Nn][Ii][Tt][Yy])\s*$"


class ErrorLog:
    """The errors of one upload: the first ``cap`` in reading order and the total.

    ``complete`` is False when reading stopped early (a table over the row limit): ``total``
    then counts what was read, a lower bound.
    """

    def __init__(self, cap: int = MAX_ERRORS) -> None:
        self.cap, self.total, self.complete = cap, 0, True
        self.items: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []

    def add(self, message: str, allowed: str, *, column: str | None = None,
            rows: np.ndarray | None = None, count: int | None = None) -> None:
        """One table-level error (``rows`` None: the header, the file) or one per row."""
        listed = [None] if rows is None else rows[: self.cap - len(self.items)].tolist()
        self.total += (1 if rows is None else len(rows)) if count is None else count
        self._pending += [{"row": row, "column": column, "message": message, "allowed": allowed}
                          for row in listed]

    def flag(self, mask: np.ndarray, rows: "BatchRows", column: str, message: str,
             allowed: str) -> None:
        """The rows of a batch where ``mask`` holds break one rule."""
        count = int(np.count_nonzero(mask))
        if count:
            room = self.cap - len(self.items)
            self.add(message, allowed, column=column, count=count,
                     rows=rows.numbers(np.flatnonzero(mask)[:room]))

    def flush(self) -> None:
        """Keep the pending errors, in row order, while there is room (at batch ends)."""
        self._pending.sort(key=lambda item: item["row"] or 0)
        self.items += self._pending[: self.cap - len(self.items)]
        self._pending = []

    def __bool__(self) -> bool:
        return self.total > 0


@dataclass
class BatchRows:
    """Where a batch sits in the file: its first kept row, and the rows dropped before."""

    first: int  # kept rows before this batch
    skipped: Sequence[int] = field(default_factory=list)  # dropped data rows, ascending

    def numbers(self, positions: np.ndarray) -> np.ndarray:
        """1-based data rows of the batch's positions, counting the dropped rows too."""
        kept = self.first + 1 + np.asarray(positions, dtype=np.int64)
        if not self.skipped:
            return kept
        skipped = np.asarray(self.skipped, dtype=np.int64)
        before = skipped - np.arange(len(skipped))
        return kept + np.searchsorted(before, kept, side="right")


@dataclass
class CheckedBatch:
    features: np.ndarray  # (m, p) float64, schema order, categoricals as codes
    outcome: np.ndarray  # (m,) float64 0/1, 1 = the schema's positive value
    attributes: dict[str, np.ndarray]  # name -> (m,) int64 codes
    ids: pa.Array | None  # string ids, None without an id column
    imputed: dict[str, int]


def as_text(arr: pa.Array, column: str, rows: BatchRows,
            log: ErrorLog) -> tuple[pa.Array, np.ndarray]:
    """The column as UTF-8 text; values that are not valid UTF-8 are logged and nulled."""
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr, np.zeros(len(arr), dtype=bool)
    try:
        return arr.cast(pa.string()), np.zeros(len(arr), dtype=bool)
    except pa.ArrowInvalid:  # rare: find the rows in Python
        bad = np.array([v is not None and not _utf8(v) for v in arr.to_pylist()], dtype=bool)
        log.flag(bad, rows, column, "not valid UTF-8", "UTF-8 text")
        return pc.if_else(pa.array(bad), None, arr).cast(pa.string()), bad


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def numbers(arr: pa.Array, column: str, rows: BatchRows,
            log: ErrorLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, missing, usable) of a numeric column, from numbers or from text.

    Text that is no number is logged here; NaN and infinity come back as values (usable), for
    the caller's bounds check to report.
    """
    bad = np.zeros(len(arr), dtype=bool)
    if not any(test(arr.type) for test in (pa.types.is_integer, pa.types.is_floating,
                                           pa.types.is_boolean, pa.types.is_decimal,
                                           pa.types.is_null)):
        arr, bad = as_text(arr, column, rows, log)
        arr, bad = _parse(arr, bad, column, rows, log)
    missing = _nulls(arr) & ~bad
    values = arr.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return values, missing, ~(missing | bad)


def _parse(text: pa.Array, bad: np.ndarray, column: str, rows: BatchRows,
           log: ErrorLog) -> tuple[pa.Array, np.ndarray]:
    ok = pc.or_(pc.match_substring_regex(text, _NUMBER),
                pc.match_substring_regex(text, _NOT_FINITE))
    unparsed = ~_mask(ok.fill_null(True)) & ~bad
    log.flag(unparsed, rows, column, "not a number", "a number")
    trimmed = pc.utf8_trim_whitespace(pc.if_else(ok, text, None))
    return pc.cast(trimmed, pa.float64()), bad | unparsed


def _mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def _nulls(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), dtype=bool)
    return _mask(arr.is_null())


def codes(arr: pa.Array, categories: list[str], column: str, rows: BatchRows,
          log: ErrorLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, missing, usable) of a categorical column: each value's index in the list."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string())
    text, bad = as_text(arr, column, rows, log)
    index = pc.index_in(text, value_set=pa.array(categories, pa.string()))
    missing = _nulls(text) & ~bad
    unknown = _mask(index.is_null()) & ~missing & ~bad
    log.flag(unknown, rows, column, "unknown category", f"one of {categories}")
    values = index.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return values, missing, ~(missing | bad | unknown)


def _check_values(feature: FeatureSpec, values: np.ndarray, usable: np.ndarray,
                  rows: BatchRows, log: ErrorLog) -> None:
    """Finite, within the public bounds, whole where the kind says so."""
    lower, upper = feature.bounds
    whole = feature.kind is not FeatureKind.NUMERIC
    good = (values >= lower) & (values <= upper)  # False for NaN
    if whole:
        good &= values == np.floor(values)
    if np.all(good | ~usable):  # the common case: one pass, no detail needed
        return
    finite = np.isfinite(values)
    log.flag(usable & ~finite, rows, feature.name, "NaN or infinity", "a finite number")
    usable = usable & finite
    if feature.kind is FeatureKind.BINARY:
        log.flag(usable & ~good, rows, feature.name, "not 0 or 1", "0 or 1")
        return
    span = f"[{lower:g}, {upper:g}]"
    log.flag(usable & ((values < lower) | (values > upper)), rows, feature.name,
             "outside the declared bounds", span)
    if whole:
        log.flag(usable & (values != np.floor(values)), rows, feature.name,
                 "not a whole number", f"whole numbers in {span}")


def check_feature(feature: FeatureSpec, arr: pa.Array, rows: BatchRows,
                  log: ErrorLog) -> tuple[np.ndarray, int]:
    """The feature's float64 values (missing ones imputed when declared) and how many."""
    if feature.kind is FeatureKind.CATEGORICAL:
        values, missing, usable = codes(arr, feature.categories or [], feature.name, rows, log)
    else:
        values, missing, usable = numbers(arr, feature.name, rows, log)
        _check_values(feature, values, usable, rows, log)
    imputed = int(np.count_nonzero(missing))
    if imputed and feature.missing == "reference":
        values = np.where(missing, feature.reference_value, values)
    elif imputed:
        log.flag(missing, rows, feature.name, "missing value",
                 'a value (or declare "missing": "reference" to impute)')
        imputed = 0
    return values, imputed


def _check_attribute(attribute: Attribute, arr: pa.Array, rows: BatchRows,
                     log: ErrorLog) -> np.ndarray:
    values, missing, _ = codes(arr, attribute.categories, attribute.name, rows, log)
    log.flag(missing, rows, attribute.name, "missing value", f"one of {attribute.categories}")
    return np.nan_to_num(values).astype(np.int64)


def _check_outcome(schema: DatasetSchema, arr: pa.Array, rows: BatchRows,
                   log: ErrorLog) -> np.ndarray:
    name = schema.outcome.name
    values, missing, usable = numbers(arr, name, rows, log)
    log.flag(missing, rows, name, "missing outcome", "0 or 1")
    log.flag(usable & (values != 0) & (values != 1), rows, name, "not 0 or 1", "0 or 1")
    return (values == schema.outcome.positive).astype(np.float64)


def _check_ids(arr: pa.Array, column: str, rows: BatchRows, log: ErrorLog) -> pa.Array:
    if pa.types.is_integer(arr.type):
        arr = arr.cast(pa.string())
    text, _ = as_text(arr, column, rows, log)
    allowed = f"a unique id of 1 to {MAX_ID_CHARS} characters"
    log.flag(_nulls(text), rows, column, "missing id", allowed)
    lengths = pc.utf8_length(text)
    if (pc.max(lengths).as_py() or 0) > MAX_ID_CHARS:
        too_long = _mask(pc.greater(lengths, MAX_ID_CHARS).fill_null(False))
        log.flag(too_long, rows, column, "id too long", allowed)
    return text


def check_batch(schema: DatasetSchema, columns: Mapping[str, pa.Array], rows: BatchRows,
                log: ErrorLog) -> CheckedBatch:
    """Every per-value rule on one batch; the arrays are only meaningful while ``log`` is
    empty (the caller stops keeping them at the first error)."""
    features = np.empty((len(columns[schema.outcome.name]), len(schema.features)))
    imputed = {}
    for j, feature in enumerate(schema.features):
        features[:, j], imputed[feature.name] = check_feature(
            feature, columns[feature.name], rows, log)
    attributes = {a.name: _check_attribute(a, columns[a.name], rows, log)
                  for a in schema.attributes}
    outcome = _check_outcome(schema, columns[schema.outcome.name], rows, log)
    ids = None
    if schema.id_column is not None:
        ids = _check_ids(columns[schema.id_column], schema.id_column, rows, log)
    log.flush()
    return CheckedBatch(features, outcome, attributes, ids, imputed)
