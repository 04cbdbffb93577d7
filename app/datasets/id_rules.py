"""The rules of an uploaded patient id, checked per batch, vectorised.

An id is 1 to ``MAX_ID_CHARS`` characters (as a risk batch's patient id), unique (checked once
every row is read, ``app.datasets.ingest``), and text a person and a spreadsheet read as it is:

- no control, line-separator or invisible format character, the rule names follow
  (``app.core.schemas.REFUSED_IN_TEXT``): a NUL cannot be stored in PostgreSQL, a newline or an
  ESC forges log lines and terminals, a U+202E makes an id read backwards;
- no first character ``=``, ``+``, ``-`` or ``@`` (a spreadsheet runs such a cell as a formula:
  ``=HYPERLINK(...)`` in an export a steward opens), unless the id is a signed whole number such
  as ``-12``, which a spreadsheet reads as a number.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.core.schemas import REFUSED_IN_TEXT, TEXT_RULE
from app.datasets.error_log import BatchRows, ErrorLog
from app.datasets.text_values import mask, nulls, per_value, utf8_text

MAX_ID_CHARS = 128  # as a risk batch's patient id
ID_RULE = f"a unique id of 1 to {MAX_ID_CHARS} characters"
FORMULA_RULE = ("an id that does not start with =, +, - or @ (a spreadsheet runs such a cell as a "
                "formula), unless it is a signed whole number such as -12")
# RE2 (Arrow's regex engine) spells code points \x{...}.
_REFUSED = "[" + "".join(f"\\x{{{lo:x}}}-\\x{{{hi:x}}}" for lo, hi in REFUSED_IN_TEXT) + "]"
_FORMULA, _SIGNED_WHOLE = r"^[=+\-@]", r"^[+\-][0-9]+$"

IdParts = tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


_PRINTABLE = (0x20, 0x7E)  # every refused character is outside printable ASCII
_FORMULA_BYTES = np.frombuffer(b"=+-@", np.uint8)


def _flags(text: pa.Array, pattern: str) -> np.ndarray:
    return mask(pc.match_substring_regex(text, pattern).fill_null(False))


def _bytes(text: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, data) of a ``string`` array's values, as views; None for another layout."""
    if not pa.types.is_string(text.type):
        return None
    _, offsets_buffer, data_buffer = text.buffers()
    offsets = np.frombuffer(offsets_buffer, np.int32, len(text) + 1, 4 * text.offset)
    data = (np.frombuffer(data_buffer, np.uint8) if data_buffer is not None
            else np.zeros(0, np.uint8))
    return offsets, data


def _refused(text: pa.Array) -> np.ndarray:
    """Where a value has a refused character. Ids are nearly always printable ASCII: when every
    byte of the values is, none can have one, and the regex (about 60 ms a million ids) is not
    run; any other byte (or a null slot's leftover bytes) takes the regex."""
    found = _bytes(text)
    if found is not None:
        offsets, data = found
        used = data[offsets[0]:offsets[-1]]
        if not len(used) or (used.min() >= _PRINTABLE[0] and used.max() <= _PRINTABLE[1]):
            return np.zeros(len(text), bool)
    return _flags(text, _REFUSED)


def _formula_start(text: pa.Array) -> np.ndarray:
    """Where a value starts with ``=``, ``+``, ``-`` or ``@``: its first byte (those are ASCII,
    and no other character's UTF-8 starts with their bytes), not a regex."""
    found = _bytes(text)
    if found is None:
        return _flags(text, _FORMULA)
    offsets, data = found
    starts, filled = offsets[:-1], np.diff(offsets) > 0
    first = np.zeros(len(text), np.uint8)
    first[filled] = data[starts[filled]]
    return np.isin(first, _FORMULA_BYTES) & filled & ~nulls(text)


def _id_parts(arr: pa.Array) -> IdParts:
    """(text, missing, not UTF-8, too long, refused character, formula) per value; text longer
    than the limit is nulled, so that taking a dictionary's values by row stays small."""
    if pa.types.is_integer(arr.type):
        arr = arr.cast(pa.string())
    text, bad = utf8_text(arr)
    too_long = mask(pc.greater(pc.utf8_length(text), MAX_ID_CHARS).fill_null(False))
    if too_long.any():
        text = pc.if_else(pa.array(too_long), None, text)
    formula = _formula_start(text)
    if formula.any():
        formula &= ~_flags(text, _SIGNED_WHOLE)
    return (text, nulls(text) & ~bad & ~too_long, bad, too_long, _refused(text), formula)


def check_ids(arr: pa.Array, column: str, rows: BatchRows, log: ErrorLog) -> pa.Array:
    """The id column as ``string`` (values breaking a rule may be nulled), each broken rule
    logged with its row."""
    text, missing, bad, too_long, refused, formula = per_value(arr, _id_parts)
    log.flag(missing, rows, column, "missing id", ID_RULE)
    log.flag(bad, rows, column, "not valid UTF-8", "UTF-8 text")
    log.flag(too_long, rows, column, "id too long", ID_RULE)
    log.flag(refused, rows, column, "control or format character in the id",
             f"{ID_RULE}: {TEXT_RULE}")
    log.flag(formula, rows, column, "the id starts like a spreadsheet formula", FORMULA_RULE)
    return text
