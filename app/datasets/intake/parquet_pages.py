"""The page headers of a Parquet column chunk, read without decoding a page.

A Parquet file's footer says how big each column chunk is, but only the page headers inside the
chunk say how big each page decompresses to and how it is encoded; Arrow trusts them when it
decodes. ``app.datasets.intake.parquet_limits`` reads them first, so that a small file cannot make
the reader allocate gigabytes. Each header is a Thrift struct in the compact protocol
(https://github.com/apache/parquet-format, ``PageHeader``); this reads the few fields needed
and skips the rest (statistics included), with every length checked against the bytes there.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE, DATA_PAGE_V2 = 0, 1, 2, 3
ENCODINGS = {0: "PLAIN", 2: "PLAIN_DICTIONARY", 3: "RLE", 4: "BIT_PACKED",
             5: "DELTA_BINARY_PACKED", 6: "DELTA_LENGTH_BYTE_ARRAY", 7: "DELTA_BYTE_ARRAY",
             8: "RLE_DICTIONARY", 9: "BYTE_STREAM_SPLIT"}
MAX_HEADER_BYTES = 1 << 20  # Arrow's own limit is 16 MiB; real headers are under 1 KiB
_MAX_DEPTH = 8


class DamagedChunk(ValueError):
    """The chunk's pages do not parse, or do not fill the chunk the footer describes."""


class _Short(Exception):
    """The header runs past the bytes read so far."""


@dataclass(frozen=True)
class Page:
    kind: int  # DATA_PAGE, INDEX_PAGE, DICTIONARY_PAGE or DATA_PAGE_V2
    uncompressed: int  # bytes, as the header declares (what the reader allocates)
    compressed: int  # bytes on disk after the header
    num_values: int  # values (rows of a flat column, nulls included; dictionary entries)
    encoding: str  # one of ENCODINGS' names ("" for an index page)
    body_at: int  # file offset of the page's bytes


class _Compact:
    """Just enough of Thrift's compact protocol to read a struct and skip what it ignores."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise _Short
        self.at += 1
        return self.data[self.at - 1]

    def skip(self, count: int) -> None:
        if count < 0:
            raise DamagedChunk("a negative length in a page header")
        if self.at + count > len(self.data):
            raise _Short
        self.at += count

    def varint(self) -> int:
        value = shift = 0
        while True:
            byte = self.byte()
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 63:
                raise DamagedChunk("a varint longer than 64 bits in a page header")

    def integer(self) -> int:
        raw = self.varint()
        return (raw >> 1) ^ -(raw & 1)  # zigzag

    def struct(self, depth: int = 0) -> dict[int, Any]:
        if depth > _MAX_DEPTH:
            raise DamagedChunk("page header nested too deep")
        fields: dict[int, Any] = {}
        last = 0
        while (head := self.byte()) != 0:
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self.integer()
            fields[last] = self.value(kind, depth)
        return fields

    def value(self, kind: int, depth: int) -> Any:
        if kind in (1, 2):  # a boolean field carries its value in its type
            return kind == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):
            return self.integer()
        if kind == 7:
            return self.skip(8)
        if kind == 8:  # binary (min/max statistics): skipped, never kept
            return self.skip(self.varint())
        if kind in (9, 10):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            self._check_count(size)
            for _ in range(size):
                self.byte() if head & 0x0F in (1, 2) else self.value(head & 0x0F, depth + 1)
            return None
        if kind == 11:
            size = self.varint()
            self._check_count(size)
            types = self.byte() if size else 0
            for _ in range(size):
                self.value(types >> 4, depth + 1)
                self.value(types & 0x0F, depth + 1)
            return None
        if kind == 12:
            return self.struct(depth + 1)
        raise DamagedChunk(f"unknown Thrift type {kind} in a page header")

    def _check_count(self, size: int) -> None:
        if size > len(self.data) - self.at:  # every element takes at least one byte
            raise _Short


def _page(fields: dict[int, Any], body_at: int) -> Page:
    kind, uncompressed, compressed = fields.get(1), fields.get(2), fields.get(3)
    if not (isinstance(kind, int) and isinstance(uncompressed, int)
            and isinstance(compressed, int)) or min(uncompressed, compressed) < 0:
        raise DamagedChunk("a page header without its type or sizes")
    detail = fields.get({DATA_PAGE: 5, DICTIONARY_PAGE: 7, DATA_PAGE_V2: 8}.get(kind, 0)) or {}
    encoding_field = 4 if kind == DATA_PAGE_V2 else 2
    num_values = detail.get(1, 0)
    if kind != INDEX_PAGE and (not isinstance(num_values, int) or num_values < 0
                               or detail.get(encoding_field) not in ENCODINGS):
        raise DamagedChunk("a page header without its values or encoding")
    encoding = ENCODINGS.get(detail.get(encoding_field, -1), "")
    return Page(kind, uncompressed, compressed, num_values, encoding, body_at)


def _header_at(f: BinaryIO, at: int, end: int) -> tuple[dict[int, Any], int]:
    """The header's fields at ``at`` and its length in bytes."""
    want = min(256, end - at)
    while True:
        f.seek(at)
        reader = _Compact(f.read(want))
        try:
            return reader.struct(), reader.at
        except _Short:
            if want >= min(MAX_HEADER_BYTES, end - at):
                raise DamagedChunk("a page header runs past its chunk (or over 1 MiB)") from None
            want = min(want * 8, MAX_HEADER_BYTES, end - at)


def pages(f: BinaryIO, start: int, length: int) -> Iterator[Page]:
    """Every page of the column chunk of ``length`` bytes at ``start``, in order.

    Raises:
        DamagedChunk: a header does not parse, or the pages do not fill the chunk exactly.
    """
    at, end = start, start + length
    while at < end:
        fields, size = _header_at(f, at, end)
        page = _page(fields, at + size)
        at = page.body_at + page.compressed
        if at > end:
            raise DamagedChunk("a page runs past its column chunk")
        yield page
