"""How an upload's bytes are to be read: its media type, and for CSV the request's dialect.

The dialect comes from the request's ``Content-Type`` parameters, since a file from European
Excel cannot be told from a comma-separated one with certainty by looking at it:
``text/csv; delimiter=";"; decimal=","`` reads semicolon-separated values with decimal commas;
``delimiter`` may also be a tab (``"\\t"`` or ``tab``). Without parameters a CSV is
comma-separated with decimal points. A decimal comma needs another delimiter.

A kept CSV must be read back with the dialect it was accepted under, so the dialect is part of
the kept file's name (``suffix``): ``<sha256>.csv`` for the default, e.g.
``<sha256>.delimiter-semicolon.decimal-comma.csv`` otherwise; ``upload.media_type`` stays
the plain media type (``text/csv``).
"""

import re
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import UnsupportedMediaType

CSV, PARQUET = "text/csv", "application/vnd.apache.parquet"
MEDIA_TYPES = (CSV, PARQUET)
OCTET_STREAM = "application/octet-stream"
PARQUET_MAGIC = b"PAR1"  # a Parquet file's first and last four bytes
_DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab"}
_DECIMALS = {".": "point", ",": "comma"}
_ALIASES = {"tab": "\t", "\\t": "\t"}
# One parameter: a token name, "=", a token or a quoted string (RFC 9110 section 5.6.6).
_PARAMETER = re.compile(r';\s*([^=;\s]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*?)\s*(?=;|$)')
_ALLOWED = (f'{CSV} (UTF-8; optional parameters delimiter="," ";" or tab, decimal="." or ","), '
            f"{PARQUET}, or {OCTET_STREAM} for a Parquet file (read by its content)")


@dataclass(frozen=True)
class TableFormat:
    """A media type with the dialect to read it in (CSV only; Parquet carries its own)."""

    media_type: str  # text/csv or application/vnd.apache.parquet, no parameters
    delimiter: str = ","
    decimal: str = "."

    @property
    def suffix(self) -> str:
        """The kept file's suffix: the dialect, then the format's own extension."""
        if self.media_type == PARQUET:
            return ".parquet"
        dialect = "" if self.delimiter == "," else f".delimiter-{_DELIMITERS[self.delimiter]}"
        dialect += "" if self.decimal == "." else f".decimal-{_DECIMALS[self.decimal]}"
        return f"{dialect}.csv"

    @property
    def content_type(self) -> str:
        """The canonical ``Content-Type`` that reads back as this format."""
        if self.media_type == PARQUET or (self.delimiter, self.decimal) == (",", "."):
            return self.media_type
        delimiter = "tab" if self.delimiter == "\t" else self.delimiter
        return f'{CSV}; delimiter="{delimiter}"; decimal="{self.decimal}"'

    def describe(self) -> str:
        """How a person would name the separator, for error messages."""
        return f"{_DELIMITERS[self.delimiter]}-separated values"


def _refused(content_type: str, why: str) -> UnsupportedMediaType:
    return UnsupportedMediaType(f"cannot read a table of type {content_type!r}: {why}",
                                field="Content-Type", allowed=_ALLOWED)


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", r"\1", value[1:-1])
    return value


def media_type_of(content_type: "str | TableFormat") -> TableFormat:
    """``text/csv; charset=utf-8; delimiter=";"; decimal=","`` -> the format to read it in;
    anything we cannot read is a 415. Other parameters (``header=present``) are ignored."""
    if isinstance(content_type, TableFormat):
        return content_type
    media, _, rest = content_type.partition(";")
    media = media.strip().lower()
    params: dict[str, str] = {}
    for match in _PARAMETER.finditer(f";{rest}" if rest else ""):
        params[match.group(1).lower()] = _unquoted(match.group(2))
    if media not in MEDIA_TYPES:
        raise _refused(content_type, "not a table type")
    if params.get("charset", "utf-8").lower() not in ("utf-8", "utf8"):
        raise _refused(content_type, "only UTF-8 text is read")
    if media == PARQUET:
        if {"delimiter", "decimal"} & params.keys():
            raise _refused(content_type, "delimiter and decimal are CSV parameters")
        return TableFormat(PARQUET)
    delimiter = _ALIASES.get(params.get("delimiter", ","), params.get("delimiter", ","))
    decimal = params.get("decimal", ".")
    if delimiter not in _DELIMITERS or decimal not in _DECIMALS:
        raise _refused(content_type, "unknown delimiter or decimal mark")
    if delimiter == decimal:
        raise _refused(content_type, "a decimal comma needs another delimiter")
    return TableFormat(CSV, delimiter, decimal)


_KNOWN = tuple(TableFormat(CSV, d, m) for d in _DELIMITERS for m in _DECIMALS if d != m)


def csv_suffixes() -> tuple[str, ...]:
    """Every kept CSV's possible suffix, the default (``.csv``) first."""
    return tuple(f.suffix for f in _KNOWN)


def format_of(path: Path) -> TableFormat:
    """The format a kept file was accepted in, from its name (see ``TableFormat.suffix``).

    Raises:
        ValueError: the name is not one a kept table can have.
    """
    if path.name.endswith(".parquet"):
        return TableFormat(PARQUET)
    for known in _KNOWN:
        if path.name.endswith(known.suffix) and path.name.count(".") == known.suffix.count("."):
            return known
    raise ValueError(f"{path.name} is not the name of a kept table")


def by_content(content_type: str) -> bool:
    """Whether the body's own bytes say its format (``application/octet-stream``, read as
    Parquet when it is one: ``format_of_body``) rather than its ``Content-Type``."""
    return content_type.partition(";")[0].strip().lower() == OCTET_STREAM


def format_of_body(content_type: str, path: Path) -> TableFormat:
    """The format of the body at ``path`` sent as ``content_type``: as declared, or for
    ``application/octet-stream`` Parquet when its magic bytes begin and end the file; anything
    else is a 415 (a CSV cannot be told by its bytes, nor its dialect guessed)."""
    if not by_content(content_type):
        return media_type_of(content_type)
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(len(PARQUET_MAGIC))
        f.seek(max(size - len(PARQUET_MAGIC), 0))
        tail = f.read(len(PARQUET_MAGIC))
    if size >= 2 * len(PARQUET_MAGIC) and head == tail == PARQUET_MAGIC:
        return TableFormat(PARQUET)
    raise _refused(content_type, f"an {OCTET_STREAM} body is read only as Parquet (its "
                   f"magic bytes {PARQUET_MAGIC.decode()} begin and end the file); send a "
                   f"CSV as {CSV}")
