"""What reading an uploaded Parquet file would cost, bounded from its metadata before any row
is decoded.

A Parquet file is small on disk and large in memory by design: a dictionary-encoded column
stores a value once and an index per row, so one 1 MiB string on 2,000,000 rows fits in 2 MB and
decodes to 2 TB (a reader that expands it to rows, or a check that casts it to plain strings, is
then killed). Before reading, each column chunk the schema reads is walked page header by page
header (``app.datasets.intake.parquet_pages``), and the file is refused (nothing decoded) when:

- the footer is over ``MAX_FOOTER_BYTES``, or the schema has more than
  ``settings.upload_max_columns`` columns;
- a page decompresses to more than ``settings.upload_max_page_bytes``;
- a dictionary holds a value over ``MAX_VALUE_BYTES`` (no value the schema accepts is longer:
  an id is at most 128 characters, a category 64): its length is read from the dictionary page
  itself, once;
- a text column uses ``DELTA_BYTE_ARRAY``, where each value may repeat most of the one before,
  so its decoded size has no bound but values x page size;
- one batch of ``BATCH_ROWS`` rows of a row group would hold more than
  ``settings.upload_max_decoded_bytes``: per column, its compressed chunk (Arrow reads it whole),
  its largest page and dictionary, and the batch's values (a fixed width, a dictionary's longest
  value, or the most bytes of plain text pages one batch can touch);
- the pages do not fill their chunks as the footer says, or hold other than its rows.

Each refusal is one error naming the column, the figure and the limit. Reading then never holds
more than these bounds, whatever the checks do with the values (``app.datasets.intake.text_values``
checks a dictionary's values once, never per row).
"""

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from app.core.settings import settings
from app.datasets.intake.error_log import ErrorLog
from app.datasets.intake.parquet_pages import DICTIONARY_PAGE, INDEX_PAGE, DamagedChunk, Page, pages

BATCH_ROWS = 1 << 16
MAX_VALUE_BYTES = 1024
MAX_FOOTER_BYTES = 8 << 20
_SCAN_VALUES = 4_000_000  # dictionary values measured per file (bounded work); beyond, refused
_WIDTHS = {"BOOLEAN": 1, "INT32": 4, "INT64": 8, "INT96": 12, "FLOAT": 4, "DOUBLE": 8}
_OWN_BYTES = 24  # per value: the checks' float64 values and masks
_CODECS = {"SNAPPY": "snappy", "BROTLI": "brotli", "ZSTD": "zstd", "LZ4_RAW": "lz4_raw"}
_FIX = "a well-formed Parquet file"


class Refused(Exception):
    """One limit the file breaks: a 422 naming it (``message``, ``allowed``, ``column``)."""

    def __init__(self, message: str, allowed: str, column: str | None = None) -> None:
        super().__init__(message)
        self.message, self.allowed, self.column = message, allowed, column


def footer_fits(path: Path, log: ErrorLog) -> bool:
    """Whether the footer (which Arrow parses whole on opening) is within ``MAX_FOOTER_BYTES``;
    a file too short to have one is left to Arrow to call not Parquet."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size < 12:
            return True
        f.seek(size - 8)
        length, magic = struct.unpack("<I4s", f.read(8))
    if magic == b"PAR1" and length > MAX_FOOTER_BYTES:
        log.add(f"the Parquet footer is {length} bytes",
                f"a footer of at most {MAX_FOOTER_BYTES} bytes (fewer row groups or columns)")
        return False
    return True


@dataclass
class _Chunk:
    """What one column chunk costs to read a batch of."""

    compressed: int = 0
    largest_page: int = 0
    dictionary: int = 0  # bytes of its decoded dictionary page, held for the row group
    longest_value: int = 0  # of its dictionary (byte arrays)
    dictionary_rows: int = 0  # rows in dictionary-encoded pages
    plain: list[tuple[int, int]] | None = None  # (values, bytes) of other byte-array pages

    def batch_bytes(self, batch: int, width: int) -> int:
        values = batch * (_OWN_BYTES + (width if width else 4))
        if not width:  # byte arrays: a dictionary's longest value per row, and plain pages
            values += min(batch, self.dictionary_rows) * self.longest_value
            values += _window(self.plain or [], batch)
        return self.compressed + self.largest_page + self.dictionary + values


def _window(plain: list[tuple[int, int]], batch: int) -> int:
    """The most bytes of consecutive pages one batch of ``batch`` rows can touch: the pages
    strictly inside it hold fewer than ``batch`` values."""
    best = total = values = lo = 0
    for hi, (count, size) in enumerate(plain):
        total, values = total + size, values + count
        while lo < hi and values - plain[lo][0] - count >= batch:
            total, values = total - plain[lo][1], values - plain[lo][0]
            lo += 1
        best = max(best, total)
    return best


class _Walk:
    """The page walk of one file: the limits, and the budget of dictionary bytes measured."""

    def __init__(self, f: BinaryIO, metadata: pq.FileMetaData) -> None:
        self.f, self.metadata = f, metadata
        self.scan_left = _SCAN_VALUES

    def chunk(self, group: int, index: int, name: str, rows: int) -> _Chunk:
        meta = self.metadata.row_group(group).column(index)
        start = meta.data_page_offset
        if meta.has_dictionary_page and meta.dictionary_page_offset:
            start = min(start, meta.dictionary_page_offset)
        text = meta.physical_type == "BYTE_ARRAY"
        cost = _Chunk(compressed=meta.total_compressed_size, plain=[] if text else None)
        values = 0
        try:
            for page in pages(self.f, start, meta.total_compressed_size):
                self._page(page, cost, name, text, meta.compression)
                values += page.num_values if page.kind not in (DICTIONARY_PAGE, INDEX_PAGE) else 0
        except DamagedChunk as exc:
            raise Refused(f"the pages of the column do not read ({exc})", _FIX, name) from None
        if values != rows:
            raise Refused(f"the column's pages hold {values} values for {rows} rows "
                          f"(row group {group})", _FIX, name)
        return cost

    def _page(self, page: Page, cost: _Chunk, name: str, text: bool, codec: str) -> None:
        limit = settings.upload_max_page_bytes
        if page.uncompressed > limit:
            raise Refused(f"a page of {page.uncompressed} bytes uncompressed",
                          f"pages of at most {limit} bytes (settings.upload_max_page_bytes)",
                          name)
        cost.largest_page = max(cost.largest_page, page.uncompressed)
        if page.kind == DICTIONARY_PAGE:
            cost.dictionary += page.uncompressed + 4 * page.num_values
            if text:
                cost.longest_value = max(cost.longest_value, self._longest(page, codec, name))
        elif page.kind != INDEX_PAGE and text:
            if page.encoding == "DELTA_BYTE_ARRAY":
                raise Refused("text encoded as DELTA_BYTE_ARRAY (its decoded size is unbounded)",
                              "text written with dictionary or plain encoding (Spark: "
                              "parquet.writer.version v1)", name)
            if page.encoding in ("PLAIN_DICTIONARY", "RLE_DICTIONARY"):
                cost.dictionary_rows += page.num_values
            elif cost.plain is not None:
                cost.plain.append((page.num_values, page.uncompressed))

    def _longest(self, page: Page, codec: str, name: str) -> int:
        """The longest value of a text dictionary page (PLAIN: a 4-byte length, then bytes)."""
        bound = page.uncompressed - 4 * page.num_values  # were every other value empty
        if bound <= MAX_VALUE_BYTES:
            return max(bound, 0)
        if page.num_values > self.scan_left:
            raise Refused(f"dictionaries of more than {_SCAN_VALUES} values in all, whose "
                          f"values could be up to {bound} bytes long",
                          f"values of at most {MAX_VALUE_BYTES} bytes, in smaller dictionaries",
                          name)
        self.scan_left -= page.num_values
        self.f.seek(page.body_at)
        data = _decompress(codec, self.f.read(page.compressed), page.uncompressed, name)
        longest = _longest_plain(data, page.num_values, name)
        if longest > MAX_VALUE_BYTES:
            raise Refused(f"a value of {longest} bytes in the column's dictionary",
                          f"values of at most {MAX_VALUE_BYTES} bytes", name)
        return longest


def _longest_plain(data: bytes, count: int, name: str) -> int:
    unpack, at, longest = struct.Struct("<I").unpack_from, 0, 0
    try:
        for _ in range(count):
            (length,) = unpack(data, at)
            at += 4 + length
            longest = max(longest, length)
    except struct.error:
        raise Refused("the column's dictionary page is damaged", _FIX, name) from None
    if at > len(data):
        raise Refused("the column's dictionary page is damaged", _FIX, name)
    return longest


def _decompress(codec: str, data: bytes, size: int, name: str) -> bytes:
    """A page's bytes, decompressed to at most the ``size`` its header declares."""
    try:
        if codec == "UNCOMPRESSED":
            return data
        if codec == "GZIP":
            return zlib.decompressobj(wbits=47).decompress(data, size)  # gzip or zlib
        if codec == "LZ4":  # the deprecated Hadoop framing, or raw blocks
            return _hadoop_lz4(data, size)
        return pa.Codec(_CODECS[codec]).decompress(data, decompressed_size=size).to_pybytes()
    except (KeyError, pa.ArrowException, zlib.error, ValueError):
        raise Refused(f"a dictionary page compressed with {codec} does not read",
                      f"{_FIX} (SNAPPY, ZSTD, GZIP, BROTLI, LZ4_RAW or none)", name) from None


def _hadoop_lz4(data: bytes, size: int) -> bytes:
    raw = pa.Codec("lz4_raw")
    if len(data) >= 8:
        out, at = bytearray(), 0
        while at + 8 <= len(data) and len(out) < size:
            want, stored = struct.unpack_from(">II", data, at)
            if want > size - len(out) or at + 8 + stored > len(data):
                break
            out += raw.decompress(data[at + 8:at + 8 + stored], decompressed_size=want)
            at += 8 + stored
        if at == len(data) and len(out) == size:
            return bytes(out)
    return raw.decompress(data, decompressed_size=size).to_pybytes()


def check(path: Path, metadata: pq.FileMetaData, columns: list[str], log: ErrorLog) -> None:
    """Log the first limit the file breaks for the named (flat) columns; nothing is decoded."""
    limit = settings.upload_max_decoded_bytes
    schema = metadata.schema
    index = {schema.column(i).path: i for i in range(metadata.num_columns)}
    widths = {name: _width(schema.column(index[name])) for name in columns}
    try:
        with path.open("rb") as f:
            walk = _Walk(f, metadata)
            for group in range(metadata.num_row_groups):
                rows = metadata.row_group(group).num_rows
                batch = min(BATCH_ROWS, rows)
                total = sum(walk.chunk(group, index[name], name, rows).batch_bytes(
                    batch, widths[name]) for name in columns)
                if total > limit:
                    raise Refused(
                        f"row group {group} would hold about {total >> 20} MiB to read "
                        f"{batch} rows", f"at most {limit} bytes "
                        "(settings.upload_max_decoded_bytes): smaller row groups or pages")
    except Refused as refused:
        log.add(refused.message, refused.allowed, column=refused.column)


def _width(column: pq.ColumnSchema) -> int:
    """Bytes per decoded value of a fixed-width column; 0 for byte arrays."""
    if column.physical_type == "FIXED_LEN_BYTE_ARRAY":
        return max(int(column.length or 0), 16)
    return _WIDTHS.get(column.physical_type, 0)
