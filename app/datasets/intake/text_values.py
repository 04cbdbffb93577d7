"""Text columns as the checks see them, whatever Arrow type a writer chose.

Writers differ in how they store the same text: ``string``, ``large_string`` (pandas >= 2 with
pyarrow strings, polars), ``string_view``, plain or large binary (Spark and Hive without the UTF-8
annotation), or dictionary-encoded (pandas categoricals, R factors). The checks read them all as
one ``string`` array, with values that are not UTF-8 set apart.

A dictionary-encoded column is never expanded to its rows before its values are checked:
``per_value`` checks the dictionary's values once and spreads each result to the rows by index,
so a file whose one long value repeats on every row costs its dictionary, not rows x value.
"""

from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Parts = TypeVar("Parts", bound=tuple[np.ndarray | pa.Array, ...])


def mask(arr: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy (nulls must be filled first)."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def nulls(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), dtype=bool)
    return mask(arr.is_null())


def _is_text(kind: pa.DataType) -> bool:
    return (pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind))


def utf8_text(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(the values as ``string``, where they were not valid UTF-8); those values are nulled."""
    if pa.types.is_string(arr.type):
        return arr, np.zeros(len(arr), dtype=bool)
    if _is_text(arr.type):  # Arrow checked the UTF-8 already: only the layout changes
        return arr.cast(pa.string()), np.zeros(len(arr), dtype=bool)
    try:
        return arr.cast(pa.string()), np.zeros(len(arr), dtype=bool)
    except pa.ArrowInvalid:  # rare: find the values in Python
        bad = np.array([v is not None and not _utf8(v) for v in arr.to_pylist()], dtype=bool)
        return pc.if_else(pa.array(bad), None, arr).cast(pa.string()), bad


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def per_value(arr: pa.Array, classify: Callable[[pa.Array], Parts]) -> Parts:
    """``classify(arr)``, each part one entry per row; for a dictionary array, ``classify``
    runs once on the dictionary's values (and a null, for null rows) and each part is then
    taken by the rows' indices."""
    if not pa.types.is_dictionary(arr.type):
        return classify(arr)
    dictionary = arr.dictionary
    values = pa.concat_arrays([dictionary, pa.nulls(1, dictionary.type)])
    at = arr.indices.cast(pa.int64()).fill_null(len(dictionary)).to_numpy(zero_copy_only=False)
    spread = tuple(part.take(pa.array(at)) if isinstance(part, pa.Array) else part[at]
                   for part in classify(values))
    return spread  # type: ignore[return-value]  # same parts, one entry per row
