"""Uploaded tables against their schema: every rule names its row and column, CSV and Parquet
give the same arrays, the fingerprint ignores row order, and the result is all or nothing."""

import asyncio
import copy
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sklearn.datasets import load_breast_cancer

from app.core.errors import UnsupportedMediaType, install_error_handlers
from app.datasets import record_coins
from app.datasets.intake import ingest, spool, table_readers, table_store
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from tests.datasets.test_dataset_schema import CONTRACT

SCHEMA = DatasetSchema.model_validate(CONTRACT)
HEADER = ["patient_id", "phq9", "sex", "prior_crisis", "crisis_30d"]
ROWS = [
    ["p1", "3", "male", "0", "1"],
    ["p2", "12", "female", "1", "0"],
    ["p3", "27", "other", "0", "0"],
    ["p4", "0", "female", "1", "1"],
    ["p5", "9", "male", "0", "0"],
]


def write_csv(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    lines = [",".join(header), *(",".join(row) for row in rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[list[str]], header: list[str] = HEADER) -> Path:
    """Every column as text (empty cell: null), the way a careless export writes it."""
    columns = {name: pa.array([row[j] or None for row in rows], pa.string())
               for j, name in enumerate(header)}
    pq.write_table(pa.table(columns), path)
    return path


def rejected(path: Path, schema: DatasetSchema = SCHEMA, media: str = ingest.CSV) -> Any:
    with pytest.raises(ingest.TableInvalid) as caught:
        ingest.ingest_file(path, media_type=media, schema=schema)
    return caught.value


def found(error: ingest.TableInvalid) -> list[tuple[Any, Any, str]]:
    return [(e["row"], e["column"], e["message"]) for e in error.extra["errors"]]


VALUE_RULES = [  # (row, column, value, message)
    (2, "phq9", "abc", "not a number"),
    (2, "phq9", "NaN", "NaN or infinity"),
    (2, "phq9", "inf", "NaN or infinity"),
    (2, "phq9", "-Infinity", "NaN or infinity"),
    (3, "phq9", "28", "outside the declared bounds"),
    (3, "phq9", "-1", "outside the declared bounds"),
    (4, "phq9", "2.5", "not a whole number"),
    (1, "phq9", "", "missing value"),
    (5, "prior_crisis", "2", "not 0 or 1"),
    (5, "prior_crisis", "0.5", "not 0 or 1"),
    (2, "sex", "Female", "unknown category"),
    (2, "sex", "", "missing value"),
    (3, "crisis_30d", "2", "not 0 or 1"),
    (3, "crisis_30d", "yes", "not a number"),
    (3, "crisis_30d", "", "missing outcome"),
    (4, "patient_id", "p1", "duplicate id"),
    (4, "patient_id", "", "missing id"),
    (4, "patient_id", "p" * 129, "id too long"),
]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize(("row", "column", "value", "message"), VALUE_RULES)
def test_each_value_rule_names_row_and_column(
    tmp_path: Path, fmt: str, row: int, column: str, value: str, message: str
) -> None:
    rows = copy.deepcopy(ROWS)
    rows[row - 1][HEADER.index(column)] = value
    if fmt == "csv":
        error = rejected(write_csv(tmp_path / "t.csv", rows))
    else:
        error = rejected(write_parquet(tmp_path / "t.parquet", rows), media=ingest.PARQUET)
    assert (row, column, message) in found(error)
    assert error.status == 422 and error.extra["complete"] is True
    assert all(e["allowed"] for e in error.extra["errors"])
    assert error.extra["total"] == (2 if message == "duplicate id" else 1)


HEADER_RULES = [  # (file bytes, column, message piece)
    (b"patient_id,phq9,prior_crisis,crisis_30d\np1,3,0,1\n", "sex", "missing column"),
    (b"patient_id,phq9,sex,prior_crisis,crisis_30d,notes\np1,3,male,0,1,x\n", "notes",
     "unexpected column"),
    (b"patient_id,phq9,phq9,sex,prior_crisis,crisis_30d\n", "phq9", "more than once"),
    (b"patient_id;phq9;sex;prior_crisis;crisis_30d\np1;3;male;0;1\n", None, "semicolons"),
    (b"patient_id\tphq9\tsex\tprior_crisis\tcrisis_30d\n", None, "tabs"),
    (b"", None, "empty"),
    (b"patient_id,phq9,s\xe9x,prior_crisis,crisis_30d\n", None, "not valid UTF-8"),
]


@pytest.mark.parametrize(("content", "column", "message"), HEADER_RULES)
def test_a_header_that_does_not_match_the_schema_is_refused_before_the_rows(
    tmp_path: Path, content: bytes, column: str | None, message: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    error = rejected(path)
    assert any(e["row"] is None and e["column"] == column and message in e["message"]
               for e in error.extra["errors"]), found(error)
    assert error.extra["complete"] is False


def test_table_wide_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert found(rejected(write_csv(tmp_path / "a.csv", []))) == [
        (None, None, "no data rows")]
    one_class = [row[:4] + ["0"] for row in ROWS]
    assert found(rejected(write_csv(tmp_path / "b.csv", one_class))) == [
        (None, "crisis_30d", "the outcome has a single class")]
    monkeypatch.setattr(ingest, "MAX_ROWS", 3)
    monkeypatch.setattr(table_readers, "MAX_ROWS", 3)
    error = rejected(write_csv(tmp_path / "c.csv", ROWS))
    assert found(error) == [(None, None, "more than 3 rows")]
    assert error.extra["complete"] is False
    error = rejected(write_parquet(tmp_path / "c.parquet", ROWS), media=ingest.PARQUET)
    assert found(error) == [(None, None, "5 rows")]


def test_a_broken_line_keeps_the_numbers_of_the_rows_after_it(tmp_path: Path) -> None:
    rows = copy.deepcopy(ROWS)
    rows[1] = ["p2", "12", "female", "1"]  # 4 fields
    rows[3][1] = "x"  # data row 4, the third row Arrow keeps
    path = write_csv(tmp_path / "t.csv", rows)
    with path.open("a") as f:
        f.write("\np6,1,male,0,0\n")  # a blank line is ignored, not counted
    rows_found = found(rejected(path))
    assert rows_found == [(2, None, "4 fields instead of 5"), (4, "phq9", "not a number")]


def test_invalid_utf8_in_a_cell_names_the_row(tmp_path: Path) -> None:
    path = write_csv(tmp_path / "t.csv", ROWS)
    path.write_bytes(path.read_bytes().replace(b"other", b"oth\xe9r"))
    assert found(rejected(path)) == [(3, "sex", "not valid UTF-8")]


def test_errors_are_capped_at_100_with_the_exact_total(tmp_path: Path) -> None:
    rows = [[f"p{i}", "x", "zzz", "0", str(i % 2)] for i in range(300)]
    error = rejected(write_csv(tmp_path / "t.csv", rows))
    assert error.extra["total"] == 600 and error.extra["complete"] is False  # 500 unlisted
    errors = found(error)
    assert len(errors) == 100
    assert errors[:2] == [(1, "phq9", "not a number"), (1, "sex", "unknown category")]
    assert errors[-1] == (50, "sex", "unknown category")


def test_parquet_specific_rules(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"patient_id,phq9\n")
    assert found(rejected(path, media=ingest.PARQUET)) == [(None, None, "not a Parquet file")]
    table = _typed(ROWS).set_column(1, "phq9", pa.array([[1]] * 5))
    pq.write_table(table, path)
    (error,) = found(rejected(path, media=ingest.PARQUET))
    assert error[1] == "phq9" and error[2].startswith("a column of type list<")
    table = _typed(ROWS).set_column(1, "phq9", pa.array([1.0, np.nan, None, 4.0, 5.0]))
    pq.write_table(table, path)
    assert found(rejected(path, media=ingest.PARQUET)) == [
        (2, "phq9", "NaN or infinity"), (3, "phq9", "missing value")]


def _typed(rows: list[list[str]]) -> pa.Table:
    """The table as a careful export writes it: numbers, booleans, dictionary-encoded text."""
    return pa.table({
        "patient_id": pa.array([r[0] for r in rows]),
        "phq9": pa.array([int(r[1]) for r in rows], pa.int16()),
        "sex": pa.array([r[2] for r in rows]).dictionary_encode(),
        "prior_crisis": pa.array([r[3] == "1" for r in rows]),
        "crisis_30d": pa.array([int(r[4]) for r in rows], pa.int8()),
    })


def test_csv_and_parquet_give_the_same_arrays(tmp_path: Path) -> None:
    from_csv = ingest.ingest_file(write_csv(tmp_path / "t.csv", ROWS), media_type="text/csv",
                                  schema=SCHEMA)
    pq.write_table(_typed(ROWS), tmp_path / "t.parquet")
    from_parquet = ingest.ingest_file(tmp_path / "t.parquet", media_type=ingest.PARQUET,
                                      schema=SCHEMA)
    for table in (from_csv, from_parquet):
        assert table.features.dtype == np.float64
        assert table.features.tolist() == [
            [3, 1, 0], [12, 0, 1], [27, 2, 0], [0, 0, 1], [9, 1, 0]]
        assert table.outcome.tolist() == [1, 0, 0, 1, 0]
        assert table.ids.to_pylist() == ["p1", "p2", "p3", "p4", "p5"]
        assert table.imputed == {"phq9": 0, "sex": 0, "prior_crisis": 0}
    assert from_csv.fingerprint == from_parquet.fingerprint


def _legacy_table(table: table_store.IngestedTable,
                  schema: DatasetSchema = SCHEMA) -> tuple[pa.Table, dict[str, Any]]:
    """The service's own stored layout (before migration 0014): columns and metadata."""
    columns: dict[str, Any] = {table_store.ID_COLUMN: table.ids}
    for j, name in enumerate(schema.feature_names):
        columns[name] = pa.array(table.features[:, j])
    columns[schema.outcome.name] = pa.array(table.outcome.astype(np.int8))
    meta = {"schema_hash": schema_hash(schema), "fingerprint": table.fingerprint,
            "imputed": table.imputed}
    return pa.table(columns), meta


def _legacy_file(table: table_store.IngestedTable, directory: Path,
                 schema: DatasetSchema = SCHEMA) -> Path:
    """A table as uploads were stored before migration 0014 (metadata in the Parquet footer),
    named by its bytes."""
    data, meta = _legacy_table(table, schema)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "legacy.tmp"
    with pq.ParquetWriter(path, data.schema, compression="zstd") as writer:
        writer.write_table(data)
        writer.add_key_value_metadata({"dpcrisis": json.dumps(meta)})
    named = directory / f"{table_store.file_sha256(path)}.parquet"
    path.rename(named)
    return named


def test_tables_stored_in_the_old_layout_load_back(tmp_path: Path) -> None:
    table = ingest.ingest_file(write_csv(tmp_path / "t.csv", ROWS), media_type="text/csv",
                               schema=SCHEMA)
    path = _legacy_file(table, tmp_path / "data")
    loaded = table_store.load(path, schema=SCHEMA)
    assert np.array_equal(loaded.features, table.features)
    assert np.array_equal(loaded.outcome, table.outcome)
    assert loaded.ids.to_pylist() == table.ids.to_pylist()
    assert (loaded.fingerprint, loaded.imputed) == (table.fingerprint, table.imputed)
    other = DatasetSchema.model_validate({**CONTRACT, "subgroups": []})
    with pytest.raises(ValueError, match="another schema"):
        table_store.load(path, schema=other)
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(ValueError, match="do not match"):
        table_store.load(path, schema=SCHEMA)


@pytest.mark.parametrize("media", [ingest.CSV, ingest.PARQUET])
def test_an_upload_is_kept_byte_for_byte_and_named_by_its_sha256(tmp_path: Path,
                                                                 media: str) -> None:
    """The kept file is the clinic's own (``sha256sum`` gives its name); the source stays
    where it was; keeping the same bytes twice gives one file and no temporary one."""
    source = (write_csv(tmp_path / "t.csv", ROWS) if media == ingest.CSV
              else write_parquet(tmp_path / "t.parquet", ROWS))
    data = tmp_path / "data"
    pending = ingest.ingest_and_store(source, media_type=f"{media}; charset=utf-8"
                                      if media == ingest.CSV else media,
                                      schema=SCHEMA, data_dir=data)
    assert not data.exists()  # nothing is written before the commit
    stored = pending.commit()
    sent = source.read_bytes()
    assert stored.sha256 == hashlib.sha256(sent).hexdigest()
    assert stored.path == data / f"{stored.sha256}{ingest.SUFFIXES[media]}"
    assert stored.path.read_bytes() == sent and source.exists()
    assert pending.commit() == stored
    assert [p.name for p in data.iterdir()] == [stored.path.name]
    table_store.verify_bytes(stored.path)
    stored.path.write_bytes(sent + b"\n")
    with pytest.raises(ValueError, match="do not match"):
        table_store.verify_bytes(stored.path)


def test_the_fingerprint_ignores_row_order_ids_and_column_order(tmp_path: Path) -> None:
    def fingerprint(rows: list[list[str]], header: list[str] = HEADER,
                    schema: DatasetSchema = SCHEMA) -> str:
        path = write_csv(tmp_path / "t.csv", rows, header)
        return ingest.ingest_file(path, media_type="text/csv", schema=schema).fingerprint

    first = fingerprint(ROWS)
    assert fingerprint(ROWS[::-1]) == first
    assert fingerprint([[f"other-{r[0]}", *r[1:]] for r in ROWS]) == first  # re-keyed ids
    moved = [HEADER[4], *HEADER[:4]]
    assert fingerprint([[r[4], *r[:4]] for r in ROWS], moved) == first
    no_ids = DatasetSchema.model_validate({**CONTRACT, "id_column": None})
    shuffled = [r[1:] for r in (ROWS[2:] + ROWS[:2])]
    assert fingerprint(shuffled, HEADER[1:], no_ids) == first
    assert ingest.ingest_file(tmp_path / "t.csv", media_type="text/csv",
                              schema=no_ids).ids.tolist() == ["1", "2", "3", "4", "5"]
    edited = copy.deepcopy(ROWS)
    edited[0][1] = "4"
    assert fingerprint(edited) != first


def test_missing_values_are_imputed_with_the_reference_and_counted(tmp_path: Path) -> None:
    document = copy.deepcopy(CONTRACT)
    document["features"][0]["missing"] = "reference"
    document["features"][1]["missing"] = "reference"
    schema = DatasetSchema.model_validate(document)
    rows = copy.deepcopy(ROWS)
    rows[0][1] = rows[3][1] = rows[4][2] = ""
    table = ingest.ingest_file(write_csv(tmp_path / "t.csv", rows), media_type="text/csv",
                               schema=schema)
    assert table.imputed == {"phq9": 2, "sex": 1, "prior_crisis": 0}
    assert table.features[[0, 3], 0].tolist() == [5, 5]
    assert table.features[4, 1] == 0  # "female", the reference
    rows[2][3] = ""  # prior_crisis declares no imputation
    assert found(rejected(write_csv(tmp_path / "t.csv", rows), schema)) == [
        (3, "prior_crisis", "missing value")]


def test_media_types_and_the_problem_document(tmp_path: Path) -> None:
    assert ingest.media_type_of("text/csv; charset=UTF-8; header=present").media_type == ingest.CSV
    assert ingest.media_type_of("application/vnd.apache.parquet").media_type == ingest.PARQUET
    for bad in ("application/json", "text/csv; charset=latin-1"):
        with pytest.raises(UnsupportedMediaType) as caught:  # a 415
            ingest.media_type_of(bad)
        assert caught.value.field == "Content-Type" and caught.value.status == 415
    app = FastAPI()
    install_error_handlers(app)
    path = write_csv(tmp_path / "t.csv", [["p1", "x", "male", "0", "1"],
                                          ["p2", "3", "male", "0", "0"]])

    @app.post("/upload")
    def upload() -> None:
        ingest.ingest_file(path, media_type="text/csv", schema=SCHEMA)

    body = TestClient(app).post("/upload").json()
    assert body["status"] == 422 and body["type"].endswith("/invalid-table")
    assert body["errors"] == [{"row": 1, "column": "phq9", "message": "not a number",
                               "allowed": "a number"}]
    assert (body["total"], body["complete"]) == (1, True)


def test_a_body_is_spooled_to_disk_within_a_size_limit(tmp_path: Path) -> None:
    chunks = [b"patient_id,phq9\n", b"p1,3\n"]

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    spooled = asyncio.run(spool.spool(body(), tmp_path / "a", max_bytes=100))
    assert (tmp_path / "a").read_bytes() == b"".join(chunks)
    assert spooled.size == len(b"".join(chunks))
    # Hashed as it arrived: the kept file's name, without a pass over the file after it.
    assert spooled.sha256 == table_store.file_sha256(tmp_path / "a")
    with pytest.raises(spool.UploadTooLarge):
        asyncio.run(spool.spool(body(), tmp_path / "b", max_bytes=20))


def test_windows_line_endings_and_quoted_cells_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    lines = [",".join(f'"{name}"' for name in HEADER), *(",".join(row) for row in ROWS)]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    table = ingest.ingest_file(path, media_type="text/csv", schema=SCHEMA)
    assert table.features[:, 0].tolist() == [3, 12, 27, 0, 9]


MEASURE = """
import json, sys, tracemalloc
from pathlib import Path
import pyarrow as pa
import torch  # loaded at start in the service (its allocations are not the upload's)
from app.datasets.intake import ingest
from app.datasets.schema.dataset_schema import DatasetSchema
schema = DatasetSchema.model_validate_json(sys.argv[3])
ingest.ingest_file(Path(sys.argv[2]), media_type="text/csv", schema=schema)  # warm up
pool = pa.default_memory_pool()
start = pool.bytes_allocated()
tracemalloc.start()
table = ingest.ingest_file(Path(sys.argv[1]), media_type="text/csv", schema=schema)
python_peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"rows": table.n_rows, "peak": python_peak + pool.max_memory() - start}))
"""


@pytest.mark.slow  # seconds of hypothesis or I/O: the full suite runs it
def test_a_200k_row_csv_ingests_in_bounded_memory(tmp_path: Path) -> None:
    """Peak allocation (Python and numpy by tracemalloc, plus Arrow's pool high-water mark) in
    a fresh process, against the table's size in memory (Arrow's ``read_csv``)."""
    n = 200_000
    rng = np.random.default_rng(5)
    table = pa.table({
        "patient_id": pa.array(np.arange(n)).cast(pa.string()),
        "phq9": rng.integers(0, 28, n),
        "sex": pa.array(np.array(["female", "male", "other"])[rng.integers(0, 3, n)]),
        "prior_crisis": rng.integers(0, 2, n),
        "crisis_30d": rng.integers(0, 2, n),
    })
    big, small = tmp_path / "big.csv", tmp_path / "small.csv"
    options = pa_csv.WriteOptions(quoting_style="none")
    pa_csv.write_csv(table, big, options)
    pa_csv.write_csv(table.slice(0, 1000), small, options)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(big), str(small), SCHEMA.model_dump_json()],
        cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, capture_output=True, text=True,
        check=True, timeout=60,
    )
    measured = json.loads(done.stdout)
    in_memory = pa_csv.read_csv(big).nbytes
    assert measured["rows"] == n
    assert measured["peak"] < 6 * in_memory, (measured["peak"], in_memory)


def test_a_real_public_table_ingests(tmp_path: Path) -> None:
    """scikit-learn's copy of the Wisconsin breast cancer table (569 patients, 30 measurements,
    no id column), with declared caps per kind of measurement (not read off the data)."""
    data = load_breast_cancer()
    names = [str(name).replace(" ", "_") for name in data.feature_names]
    caps = {"radius": 50, "texture": 100, "perimeter": 500, "area": 10_000}

    def cap(name: str) -> float:
        return next((value for key, value in caps.items() if key in name), 2.0)

    schema = DatasetSchema.model_validate({
        "features": [{"name": name, "kind": "numeric", "lower": 0, "upper": cap(name),
                      "reference": 0} for name in names],
        "outcome": {"name": "malignant", "label": "Malignant (biopsy)",
                    "positive": 0,  # sklearn: 0 = malignant
                    "bands": {"low_medium": 0.2, "medium_high": 0.5}},  # 37% malignant
    })
    columns = {name: data.data[:, j] for j, name in enumerate(names)}
    path = tmp_path / "breast_cancer.csv"
    pa_csv.write_csv(pa.table({**columns, "malignant": data.target}), path)
    table = ingest.ingest_file(path, media_type="text/csv", schema=schema)
    assert table.features.shape == (569, 30)
    assert np.allclose(table.features, data.data)
    assert int(table.outcome.sum()) == 212  # malignant cases are the events
    assert table.ids[-1].as_py() == "569"


def _many_rows(ids: list[str]) -> list[list[str]]:
    return [[patient, "3", "male", "0", str(k % 2)] for k, patient in enumerate(ids)]


def test_duplicate_ids_are_found_long_short_and_across_chunks(tmp_path: Path) -> None:
    ids = [f"id-{k}" for k in range(2 * record_coins.CHUNK + 7)]
    ids[5] = ids[-1] = "an-identifier-longer-than-a-block"  # long ids: the BLAKE2b digests
    ids[record_coins.CHUNK + 3] = ids[9]  # short ids in two chunks
    error = rejected(write_csv(tmp_path / "t.csv", _many_rows(ids)))
    rows = sorted(e["row"] for e in error.extra["errors"])
    assert rows == [6, 10, record_coins.CHUNK + 4, len(ids)]
    assert {e["message"] for e in error.extra["errors"]} == {"duplicate id"}


def test_a_digest_collision_between_different_ids_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_coins, "id_digests",
                        lambda ids: np.zeros(len(ids), dtype=np.uint64))
    table = ingest.ingest_file(write_csv(tmp_path / "t.csv", ROWS), media_type=ingest.CSV,
                               schema=SCHEMA)
    assert table.ids.to_pylist() == ["p1", "p2", "p3", "p4", "p5"]
    rows = copy.deepcopy(ROWS)
    rows[3][0] = "p2"
    assert found(rejected(write_csv(tmp_path / "d.csv", rows))) == [
        (2, "patient_id", "duplicate id"), (4, "patient_id", "duplicate id")]


@pytest.mark.parametrize("id_column", ["patient_id", None])
def test_an_upload_checked_batch_by_batch_reads_back_as_the_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, id_column: str | None
) -> None:
    """Checked in many batches keeping only hashes and ids, an upload has the fingerprint and
    ids of the in-memory ingestion of the same file, and its kept file reads back to the same
    arrays; without an id column, ids are row numbers across batches."""
    monkeypatch.setattr(table_readers, "CSV_BLOCK_BYTES", 256)  # many small batches
    schema = SCHEMA if id_column else SCHEMA.model_copy(update={"id_column": None})
    header = HEADER if id_column else HEADER[1:]
    rng = np.random.default_rng(5)
    rows = [[f"q{k}", str(rng.integers(0, 28)), ["female", "male", "other"][k % 3],
             str(k % 2), str(int(rng.random() < 0.3))] for k in range(300)]
    rows = [row if id_column else row[1:] for row in rows]
    path = write_csv(tmp_path / "t.csv", rows, header)
    in_memory = ingest.ingest_file(path, media_type=ingest.CSV, schema=schema)
    pending = ingest.ingest_and_store(path, media_type=ingest.CSV, schema=schema,
                                      data_dir=tmp_path / "data")
    loaded = ingest.ingest_file(pending.commit().path, media_type=ingest.CSV, schema=schema)
    assert pending.fingerprint == in_memory.fingerprint == loaded.fingerprint
    assert pending.ids.to_pylist() == in_memory.ids.to_pylist() == loaded.ids.to_pylist()
    assert pending.id_words.tolist() == record_coins.id_digests(in_memory.ids).tolist()
    assert (pending.ids.to_pylist()[:3] == ["q0", "q1", "q2"] if id_column
            else pending.ids.to_pylist()[-1] == "300")
    assert np.array_equal(loaded.features, in_memory.features)
    assert np.array_equal(loaded.outcome, in_memory.outcome)


def test_a_table_that_fails_late_leaves_no_file(tmp_path: Path) -> None:
    rows = copy.deepcopy(ROWS)
    rows[4][0] = "p1"  # a duplicate id: found only once every row was read and written
    with pytest.raises(ingest.TableInvalid):
        ingest.ingest_and_store(write_csv(tmp_path / "t.csv", rows), media_type=ingest.CSV,
                                schema=SCHEMA, data_dir=tmp_path / "data")
    assert not (tmp_path / "data").exists()


def _trickle(data: bytes, pieces: int, *, stop_after: int | None = None) -> AsyncIterator[bytes]:
    """The body in ``pieces`` chunks with pauses, as a slow client sends it."""

    async def chunks() -> AsyncIterator[bytes]:
        step = -(-len(data) // pieces)
        for k, at in enumerate(range(0, len(data), step)):
            if stop_after is not None and k == stop_after:
                raise ConnectionResetError("the client went away")
            await asyncio.sleep(0.002)
            yield data[at:at + step]

    return chunks()


def test_a_spooled_body_is_kept_as_sent(tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(table_readers, "CSV_BLOCK_BYTES", 256)
    rows = [[f"q{k}", str(k % 28), ["female", "male", "other"][k % 3], str(k % 2),
             str(int(k % 7 == 0))] for k in range(400)]
    spooled = write_csv(tmp_path / "t.csv", rows)
    expected = ingest.ingest_file(spooled, media_type=ingest.CSV, schema=SCHEMA)
    sent = asyncio.run(spool.spool(_trickle(spooled.read_bytes(), 40), tmp_path / "body",
                                   max_bytes=1 << 20))
    pending = ingest.ingest_and_store(tmp_path / "body", media_type=ingest.CSV, schema=SCHEMA,
                                      data_dir=tmp_path / "data", sha256=sent.sha256)
    stored = pending.commit(link=True)
    assert stored.path.read_bytes() == spooled.read_bytes()  # the digest taken on the way
    assert stored.sha256 == hashlib.sha256(spooled.read_bytes()).hexdigest()
    loaded = ingest.ingest_file(stored.path, media_type=ingest.CSV, schema=SCHEMA)
    assert loaded.fingerprint == expected.fingerprint
    assert loaded.ids.to_pylist() == expected.ids.to_pylist()
    assert np.array_equal(loaded.features, expected.features)


def test_a_table_stored_with_its_metadata_in_the_arrow_schema_still_loads(
        tmp_path: Path) -> None:
    """Tables stored two releases ago kept their metadata in the Arrow schema; Parquet
    copies that into the footer, where ``load`` reads it."""
    table = ingest.ingest_file(write_csv(tmp_path / "t.csv", ROWS), media_type=ingest.CSV,
                               schema=SCHEMA)
    data, meta = _legacy_table(table)
    old = data.replace_schema_metadata({b"dpcrisis": json.dumps(meta).encode()})
    path = tmp_path / "old.parquet"
    pq.write_table(old, path, compression="zstd")
    loaded = table_store.load(path, schema=SCHEMA, verify=False)
    assert loaded.fingerprint == table.fingerprint
    assert np.array_equal(loaded.features, table.features)
    assert loaded.ids.to_pylist() == table.ids.to_pylist()
