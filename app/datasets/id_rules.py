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


def _flags(text: pa.Array, pattern: str) -> np.ndarray:
    return mask(pc.match_substring_regex(text, pattern).fill_null(False))


def _id_parts(arr: pa.Array) -> IdParts:
    """(text, missing, not UTF-8, too long, refused character, formula) per value; text longer
    than the limit is nulled, so that taking a dictionary's values by row stays small."""
    if pa.types.is_integer(arr.type):
        arr = arr.cast(pa.string())
    text, bad = utf8_text(arr)
    too_long = mask(pc.greater(pc.utf8_length(text), MAX_ID_CHARS).fill_null(False))
    if too_long.any():
        text = pc.if_else(pa.array(too_long), None, text)
    formula = _flags(text, _FORMULA)
    if formula.any():
        formula &= ~_flags(text, _SIGNED_WHOLE)
    return (text, nulls(text) & ~bad & ~too_long, bad, too_long, _flags(text, _REFUSED),
            formula)


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
