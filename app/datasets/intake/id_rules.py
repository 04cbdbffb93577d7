"""The rules of an uploaded patient id, checked per batch, vectorised.

An id is 1 to ``MAX_ID_CHARS`` characters (as a risk batch's patient id), unique (checked once
every row is read, ``app.datasets.intake.ingest``), and text a person and a spreadsheet read as it
is:

- no control, line-separator or invisible format character, the rule names follow
  (``app.core.schemas.REFUSED_IN_TEXT``): a NUL cannot be stored in PostgreSQL, a newline or an
  ESC forges log lines and terminals, a U+202E makes an id read backwards;
- no first character ``=``, ``+``, ``-`` or ``@`` (a spreadsheet runs such a cell as a formula:
  ``=HYPERLINK(...)`` in an export a steward opens), unless the id is a signed whole number such
  as ``-12``, which a spreadsheet reads as a number.

Under the schema's ``id_kind`` "integer" an id is a whole number instead: decimal digits with an
optional sign, leading zeros allowed, nothing else (no space, no decimal point), or a Parquet
integer. Each id is then its canonical text, the plain decimal ("007" and "+7" are "7", "-0" is
"0"), which is what the upload keys, compares and stores: a CSV "007" and a Parquet 7 are one
patient. Under "text" an id is its text as sent (a Parquet integer, its decimal text).
"""

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.core.schemas import REFUSED_IN_TEXT, TEXT_RULE
from app.datasets.intake.error_log import BatchRows, ErrorLog
from app.datasets.intake.text_values import mask, nulls, per_value, utf8_text

MAX_ID_CHARS = 128  # as a risk batch's patient id
ID_RULE = f"a unique id of 1 to {MAX_ID_CHARS} characters"
INTEGER_RULE = ("a whole number: decimal digits with an optional sign and leading zeros, no "
                "space or decimal point (the schema's id_kind is integer)")
FORMULA_RULE = ("an id that does not start with =, +, - or @ (a spreadsheet runs such a cell as a "
                "formula), unless it is a signed whole number such as -12")
# RE2 (Arrow's regex engine) spells code points \x{...}.
_REFUSED = "[" + "".join(f"\\x{{{lo:x}}}-\\x{{{hi:x}}}" for lo, hi in REFUSED_IN_TEXT) + "]"
_FORMULA, _SIGNED_WHOLE, _WHOLE = r"^[=+\-@]", r"^[+\-][0-9]+$", r"^[+\-]?[0-9]+$"

IdParts = tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


_PRINTABLE = (0x20, 0x7E)  # every refused character is outside printable ASCII
_DIGITS, _ZERO = (0x30, 0x39), 0x30
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
    byte of the values is, none can have one, and the regex (the costly part of the check) is
    not run; any other byte (or a null slot's leftover bytes) takes the regex."""
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
    filled = np.diff(offsets) > 0
    return np.isin(_first_bytes(offsets, data), _FORMULA_BYTES) & filled & ~nulls(text)


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


def _first_bytes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """Each value's first byte (0 for an empty value)."""
    starts, filled = offsets[:-1], np.diff(offsets) > 0
    first = np.zeros(len(starts), np.uint8)
    first[filled] = data[starts[filled]]
    return first


def _whole(text: pa.Array) -> tuple[np.ndarray, bool]:
    """(where a value is a whole number, whether one may not be canonical yet). Ids are
    nearly always plain digits: when every byte of the values is a digit, each non-empty value
    is whole, and only a leading zero needs rewriting; the regex runs only otherwise."""
    found = _bytes(text)
    if found is not None:
        offsets, data = found
        used = data[offsets[0]:offsets[-1]]
        if not len(used) or (used.min() >= _DIGITS[0] and used.max() <= _DIGITS[1]):
            lengths = np.diff(offsets)
            zero_first = (_first_bytes(offsets, data) == _ZERO) & (lengths > 1)
            return (lengths > 0) & ~nulls(text), bool(zero_first.any())
    return _flags(text, _WHOLE), True


def canonical_integers(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """(each whole number's canonical text, where a value is one): no ``+``, no leading zero,
    ``-`` only before a non-zero number; any other value is nulled. Vectorised in Arrow."""
    whole, rewrite = _whole(text)
    if not rewrite:
        return text, whole
    digits = pc.utf8_ltrim(pc.utf8_ltrim(text, characters="+-"), characters="0")
    digits = pc.if_else(pc.equal(pc.utf8_length(digits), 0), "0", digits)
    negative = pc.and_(pc.starts_with(text, "-"), pc.not_equal(digits, "0"))
    signed = pc.if_else(negative, pc.binary_join_element_wise("-", digits, ""), digits)
    return pc.if_else(pa.array(whole), signed, pa.scalar(None, pa.string())), whole


def _integer_parts(arr: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray,
                                           np.ndarray]:
    """(canonical text, missing, not UTF-8, too long, not a whole number) per value."""
    if pa.types.is_integer(arr.type):  # Arrow's decimal text is the canonical one
        none = np.zeros(len(arr), bool)
        return arr.cast(pa.string()), nulls(arr), none, none, none
    text, bad = utf8_text(arr)
    too_long = mask(pc.greater(pc.utf8_length(text), MAX_ID_CHARS).fill_null(False))
    if too_long.any():
        text = pc.if_else(pa.array(too_long), None, text)
    missing = nulls(text)
    canonical, whole = canonical_integers(text)
    return canonical, missing & ~bad & ~too_long, bad, too_long, ~missing & ~whole


def check_ids(arr: pa.Array, column: str, rows: BatchRows, log: ErrorLog,
              kind: Literal["text", "integer"] = "text") -> pa.Array:
    """The id column as ``string``, each id in its canonical text for its ``kind`` (values
    breaking a rule may be nulled), each broken rule logged with its row."""
    if kind == "integer":
        canonical, missing, bad, too_long, not_whole = per_value(arr, _integer_parts)
        log.flag(missing, rows, column, "missing id", ID_RULE)
        log.flag(bad, rows, column, "not valid UTF-8", "UTF-8 text")
        log.flag(too_long, rows, column, "id too long", ID_RULE)
        log.flag(not_whole, rows, column, "not a whole number", INTEGER_RULE)
        return canonical
    text, missing, bad, too_long, refused, formula = per_value(arr, _id_parts)
    log.flag(missing, rows, column, "missing id", ID_RULE)
    log.flag(bad, rows, column, "not valid UTF-8", "UTF-8 text")
    log.flag(too_long, rows, column, "id too long", ID_RULE)
    log.flag(refused, rows, column, "control or format character in the id",
             f"{ID_RULE}: {TEXT_RULE}")
    log.flag(formula, rows, column, "the id starts like a spreadsheet formula", FORMULA_RULE)
    return text
