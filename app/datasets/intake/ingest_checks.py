"""The per-value rules of an uploaded table, applied one batch at a time, vectorised.

Errors are logged with their row (``app.datasets.intake.error_log``): every rule is counted exactly,
the first ``MAX_ERRORS`` are listed. Text columns may come in any Arrow layout a writer chose
(``app.datasets.intake.text_values``); a dictionary-encoded column is checked once per dictionary
value, never expanded to its rows first. The id column's rules are in
``app.datasets.intake.id_rules``.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.datasets.intake.error_log import BatchRows, ErrorLog
from app.datasets.intake.id_rules import check_ids
from app.datasets.intake.text_values import mask, nulls, per_value, utf8_text
from app.datasets.schema.dataset_schema import Attribute, DatasetSchema, FeatureKind, FeatureSpec

_NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
_NOT_FINITE = r"^\s*[+-]?([Nn][Aa][Nn]|[Ii][Nn][Ff]|[Ii][Nn][Ff][Ii][Nn][Ii][Tt][Yy])\s*$"


@dataclass
class CheckedBatch:
    features: np.ndarray  # (m, p) float64, schema order, categoricals as codes
    outcome: np.ndarray  # (m,) float64 0/1, 1 = the schema's positive value; NaN: unlabelled
    # or (a table with errors) not a valid outcome
    attributes: dict[str, np.ndarray]  # name -> (m,) int64 codes
    ids: pa.Array | None  # string ids in their canonical text, None without an id column
    imputed: dict[str, int]


def _number_rule(decimal: str) -> str:
    return "a number" if decimal == "." else f'a number with a decimal comma (decimal="{decimal}")'


NumberParts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _number_parts(arr: pa.Array, decimal: str) -> NumberParts:
    """(values, missing, not UTF-8, not a number) per value, from numbers or from text."""
    if any(test(arr.type) for test in (pa.types.is_integer, pa.types.is_floating,
                                       pa.types.is_boolean, pa.types.is_decimal,
                                       pa.types.is_null)):
        values = arr.cast(pa.float64())  # no nulls (the common case): a view, not a copy
        values = (values.fill_null(np.nan) if values.null_count else values).to_numpy(
            zero_copy_only=False)
        none = np.zeros(len(arr), dtype=bool)
        return values, nulls(arr), none, none
    text, bad = utf8_text(arr)
    number = _NUMBER if decimal == "." else _NUMBER.replace(r"\.", re.escape(decimal))
    ok = pc.or_(pc.match_substring_regex(text, number),
                pc.match_substring_regex(text, _NOT_FINITE))
    unparsed = ~mask(ok.fill_null(True)) & ~bad
    trimmed = pc.utf8_trim_whitespace(pc.if_else(ok, text, None))
    if decimal != ".":
        trimmed = pc.replace_substring(trimmed, decimal, ".")
    values = pc.cast(trimmed, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return values, nulls(text) & ~bad, bad, unparsed


def numbers(arr: pa.Array, column: str, rows: BatchRows, log: ErrorLog,
            decimal: str = ".") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, missing, usable) of a numeric column, from numbers or from text (``decimal``:
    the text's decimal mark).

    Text that is no number is logged here; NaN and infinity come back as values (usable), for
    the caller's bounds check to report.
    """
    values, missing, bad, unparsed = per_value(arr, lambda a: _number_parts(a, decimal))
    log.flag(bad, rows, column, "not valid UTF-8", "UTF-8 text")
    log.flag(unparsed, rows, column, "not a number", _number_rule(decimal))
    return values, missing, ~(missing | bad | unparsed)


def _code_parts(arr: pa.Array, categories: list[str]) -> NumberParts:
    """(index in ``categories``, missing, not UTF-8, unknown) per value."""
    text, bad = utf8_text(arr)
    index = pc.index_in(text, value_set=pa.array(categories, pa.string()))
    missing = nulls(text) & ~bad
    unknown = mask(index.is_null()) & ~missing & ~bad
    values = index.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return values, missing, bad, unknown


def codes(arr: pa.Array, categories: list[str], column: str, rows: BatchRows,
          log: ErrorLog) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes, missing, usable) of a categorical column: each value's index in the list (a
    dictionary-encoded column is matched once per dictionary value, never per row)."""
    values, missing, bad, unknown = per_value(arr, lambda a: _code_parts(a, categories))
    log.flag(bad, rows, column, "not valid UTF-8", "UTF-8 text")
    log.flag(unknown, rows, column, "unknown category", f"one of {categories}")
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


def check_feature(feature: FeatureSpec, arr: pa.Array, rows: BatchRows, log: ErrorLog,
                  decimal: str = ".") -> tuple[np.ndarray, int]:
    """The feature's float64 values (missing ones imputed when declared) and how many."""
    if feature.kind is FeatureKind.CATEGORICAL:
        values, missing, usable = codes(arr, feature.categories or [], feature.name, rows, log)
    else:
        values, missing, usable = numbers(arr, feature.name, rows, log, decimal)
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


def _check_outcome(schema: DatasetSchema, arr: pa.Array, rows: BatchRows, log: ErrorLog,
                   decimal: str) -> np.ndarray:
    name = schema.outcome.name
    values, missing, usable = numbers(arr, name, rows, log, decimal)
    log.flag(missing, rows, name, "missing outcome", "0 or 1")
    binary = usable & ((values == 0) | (values == 1))
    log.flag(usable & ~binary, rows, name, "not 0 or 1", "0 or 1")
    return np.where(binary, values == schema.outcome.positive, np.nan)


def check_batch(schema: DatasetSchema, columns: Mapping[str, pa.Array], rows: BatchRows,
                log: ErrorLog, *, decimal: str = ".") -> CheckedBatch:
    """Every per-value rule on one batch (``decimal``: the decimal mark of numbers sent as
    text); the arrays are only meaningful while ``log`` is empty (the caller stops keeping them
    at the first error). An unlabelled table (``schema.labelled`` false) has no outcome: NaN."""
    n_rows = len(columns[schema.features[0].name])
    features = np.empty((n_rows, len(schema.features)))
    imputed = {}
    for j, feature in enumerate(schema.features):
        features[:, j], imputed[feature.name] = check_feature(
            feature, columns[feature.name], rows, log, decimal)
    attributes = {a.name: _check_attribute(a, columns[a.name], rows, log)
                  for a in schema.attributes}
    outcome = (_check_outcome(schema, columns[schema.outcome.name], rows, log, decimal)
               if schema.labelled else np.full(n_rows, np.nan))
    ids = None
    if schema.id_column is not None:
        ids = check_ids(columns[schema.id_column], schema.id_column, rows, log,
                        schema.id_kind)
    log.flush()
    return CheckedBatch(features, outcome, attributes, ids, imputed)
