"""A Parquet file is bounded from its page headers before anything is decoded (a 2 MB
dictionary bomb once drove the API to 24 GB): each limit is a 422 naming it, and the bomb is
refused in bounded memory, measured in a fresh process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from app.datasets.intake import ingest, parquet_limits, parquet_pages
from tests.api.scoring_helpers import problem
from tests.datasets.test_ingest import SCHEMA, found, rejected


def bomb(path: Path, *, rows: int, row_group: int, value_bytes: int = 1 << 20,
         column: str = "sex") -> Path:
    """One long string, dictionary-encoded on every row of ``column`` (the bomb's shape)."""
    huge = pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)),
                                          pa.array(["x" * value_bytes]))
    table = {"patient_id": pa.array(np.arange(rows)), "phq9": np.full(rows, 3, np.int8),
             "sex": pa.array(["male"] * rows).dictionary_encode(),
             "prior_crisis": np.zeros(rows, np.int8),
             "crisis_30d": (np.arange(rows) % 2).astype(np.int8)}
    table[column] = huge
    pq.write_table(pa.table(table), path, row_group_size=row_group)
    return path


def _valid(path: Path, rows: int = 1000, **options: object) -> Path:
    rng = np.random.default_rng(1)
    pq.write_table(pa.table({
        "patient_id": [f"p{i}" for i in range(rows)], "phq9": rng.integers(0, 28, rows),
        "sex": rng.choice(["female", "male", "other"], rows), "prior_crisis": np.arange(rows) % 2,
        "crisis_30d": np.arange(rows) % 3 == 0}), path, **options)
    return path


@pytest.mark.parametrize("column", ["sex", "patient_id", "phq9"])
def test_a_long_dictionary_value_is_refused_before_any_row_is_read(tmp_path: Path,
                                                                    column: str) -> None:
    path = bomb(tmp_path / "b.parquet", rows=5000, row_group=5000, value_bytes=4096,
                column=column)
    error = rejected(path, media=ingest.PARQUET)
    assert found(error) == [(None, column, "a value of 4096 bytes in the column's dictionary")]
    assert error.extra["errors"][0]["allowed"] == "values of at most 1024 bytes"
    assert error.extra["complete"] is False


def test_pages_and_decoded_batches_are_bounded(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = _valid(tmp_path / "v.parquet", rows=300_000, use_dictionary=False,
                  data_page_size=8 << 20, max_rows_per_page=300_000)  # 2.4 MB pages
    ingest.ingest_file(path, media_type=ingest.PARQUET, schema=SCHEMA)  # within the defaults
    monkeypatch.setattr(settings, "upload_max_page_bytes", 1 << 20)
    (item,) = rejected(path, media=ingest.PARQUET).extra["errors"]
    assert item["message"].startswith("a page of ") and "upload_max_page_bytes" in item["allowed"]
    monkeypatch.setattr(settings, "upload_max_page_bytes", 64 << 20)
    monkeypatch.setattr(settings, "upload_max_decoded_bytes", 4 << 20)
    (item,) = rejected(path, media=ingest.PARQUET).extra["errors"]
    assert item["message"].startswith("row group 0 would hold about")
    assert "upload_max_decoded_bytes" in item["allowed"]


def test_delta_byte_array_text_is_refused_and_other_encodings_load(tmp_path: Path) -> None:
    for encoding in ("PLAIN", "DELTA_LENGTH_BYTE_ARRAY"):
        path = _valid(tmp_path / f"{encoding}.parquet", use_dictionary=False,
                      column_encoding={"patient_id": encoding, "sex": encoding})
        assert ingest.ingest_file(path, media_type=ingest.PARQUET, schema=SCHEMA).n_rows == 1000
    path = _valid(tmp_path / "d.parquet", use_dictionary=False,
                  column_encoding={"patient_id": "DELTA_BYTE_ARRAY"})
    (item,) = rejected(path, media=ingest.PARQUET).extra["errors"]
    assert item["column"] == "patient_id" and "DELTA_BYTE_ARRAY" in item["message"]


def test_a_wide_schema_and_damaged_pages_are_422s(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = _valid(tmp_path / "v.parquet")
    monkeypatch.setattr(settings, "upload_max_columns", 4)
    assert found(rejected(path, media=ingest.PARQUET))[0] == (None, None, "5 columns")
    monkeypatch.undo()
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)  # phq9: int64
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset:chunk.data_page_offset + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    (item,) = rejected(path, media=ingest.PARQUET).extra["errors"]
    assert item["column"] == "phq9" and item["allowed"] == "a well-formed Parquet file"


@pytest.mark.parametrize("options", [
    {}, {"compression": "zstd", "data_page_version": "2.0"}, {"compression": "gzip"},
    {"compression": "brotli", "write_page_index": True}, {"compression": "lz4"},
    {"row_group_size": 100, "data_page_size": 1000}])
def test_the_page_walk_reads_what_arrow_wrote(tmp_path: Path, options: dict) -> None:
    """The page headers account for every row of every chunk, and the dictionaries' longest
    value is measured (ids: "p999", 4 bytes)."""
    path = _valid(tmp_path / "v.parquet", **options)
    metadata = pq.ParquetFile(path).metadata
    with path.open("rb") as f:
        walk = parquet_limits._Walk(f, metadata)
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            chunk = walk.chunk(group, 0, "patient_id", rows)
            assert 4 <= chunk.longest_value <= parquet_limits.MAX_VALUE_BYTES
            if metadata.num_row_groups == 1:  # a dictionary page too large to bound: measured
                assert chunk.longest_value == 4
    column = metadata.row_group(0).column(0)
    with path.open("rb") as f:
        pages = list(parquet_pages.pages(f, column.dictionary_page_offset or
                                         column.data_page_offset, column.total_compressed_size))
    assert pages[0].kind == parquet_pages.DICTIONARY_PAGE


def test_a_bomb_through_the_api_is_a_422_naming_the_limit(client: TestClient,
                                                           tmp_path: Path) -> None:
    from tests.datasets.test_upload_api import _register

    dataset = _register(client)
    body = bomb(tmp_path / "b.parquet", rows=20_000, row_group=2_000).read_bytes()
    answer = client.put(f"/v1/datasets/{dataset['id']}/data", content=body,
                        headers={"Content-Type": ingest.PARQUET})
    errors = problem(answer, 422, kind="invalid-table")["errors"]
    assert errors == [{"row": None, "column": "sex",
                       "message": "a value of 1048576 bytes in the column's dictionary",
                       "allowed": "values of at most 1024 bytes"}]


MEASURE = """
import json, resource, sys
from pathlib import Path
from app.datasets.intake import ingest
from tests.datasets.test_ingest import SCHEMA

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
# A runaway read fails here instead of taking the machine: 2 GiB of address space above now.
limit = status("VmSize") + (2 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
Path("/proc/self/clear_refs").write_text("5")
base = status("VmRSS")
try:
    ingest.ingest_and_store(Path(sys.argv[1]), media_type=ingest.PARQUET, schema=SCHEMA,
                            data_dir=Path(sys.argv[2]))
    outcome = "accepted"
except ingest.TableInvalid as error:
    outcome = error.extra["errors"][0]["message"]
except Exception as error:
    outcome = f"{type(error).__name__}: {error}"
print(json.dumps({"outcome": outcome, "peak": status("VmHWM") - base}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux peak RSS")
@pytest.mark.parametrize(("rows", "row_group"), [(2_000_000, 2_000_000), (200_000, 2_000)])
def test_the_dictionary_bomb_is_refused_in_bounded_memory(tmp_path: Path, rows: int,
                                                          row_group: int) -> None:
    """The bomb (2,000,000 rows of one 1 MiB string, one row group: 24 GB before) and
    its small-row-group variant (2.67 GB per request before): refused, peak RSS growth under
    the goal of 500 MB (a fresh process, its address space capped so a failure is safe)."""
    path = bomb(tmp_path / "b.parquet", rows=rows, row_group=row_group)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", MEASURE, str(path), str(tmp_path / "data")],
                          cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                          capture_output=True, text=True, timeout=120, check=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured["outcome"] == "a value of 1048576 bytes in the column's dictionary"
    assert measured["peak"] < 500e6, measured
