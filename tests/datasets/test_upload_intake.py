"""CSV files as a clinic's own tools write them: Excel's BOM, European Excel's
semicolons and decimal commas (declared in the Content-Type), names that differ only in case,
headers too long or too wide, fields over the csv module's limit, and ids a spreadsheet or a
terminal would not show as they are."""

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.core.database import get_database
from app.core.errors import UnsupportedMediaType
from app.core.schemas import TEXT_RULE
from app.core.settings import settings
from app.datasets.intake import ingest, stored, table_format
from app.datasets.models import Dataset
from app.datasets.rules import upload_fingerprint
from tests.api.scoring_helpers import problem
from tests.datasets.test_ingest import (
    HEADER,
    ROWS,
    SCHEMA,
    found,
    rejected,
    write_csv,
    write_parquet,
)

EUROPEAN = 'text/csv; charset=utf-8; delimiter=";"; decimal=","'


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _european(rows: list[list[str]]) -> bytes:
    lines = [";".join(HEADER), *(";".join(row) for row in rows)]
    return ("\r\n".join(lines) + "\r\n").encode()


def test_excel_csv_utf8_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    plain = write_csv(tmp_path / "plain.csv", ROWS)
    excel = _bytes(tmp_path / "excel.csv", b"\xef\xbb\xbf" + plain.read_bytes())
    expected = ingest.ingest_file(plain, media_type=ingest.CSV, schema=SCHEMA)
    table = ingest.ingest_file(excel, media_type=ingest.CSV, schema=SCHEMA)
    assert table.ids.to_pylist()[0] == "p1"  # the BOM is not part of the first name or id
    assert np.array_equal(table.features, expected.features)
    assert table.fingerprint == expected.fingerprint


def test_the_content_type_declares_the_csv_dialect() -> None:
    fmt = ingest.media_type_of(EUROPEAN)
    assert (fmt.media_type, fmt.delimiter, fmt.decimal) == (ingest.CSV, ";", ",")
    assert ingest.media_type_of("text/csv; delimiter=tab").delimiter == "\t"
    assert ingest.media_type_of("text/csv").suffix == ".csv"
    assert fmt.suffix == ".delimiter-semicolon.decimal-comma.csv"
    assert table_format.format_of(Path(f"{'a' * 64}{fmt.suffix}")) == fmt
    for bad in ('text/csv; decimal=","', 'text/csv; delimiter="|"',
                'application/vnd.apache.parquet; delimiter=";"'):
        with pytest.raises(UnsupportedMediaType) as caught:
            ingest.media_type_of(bad)
        assert caught.value.status == 415 and caught.value.field == "Content-Type"


def test_european_excel_csv_loads_when_declared_and_is_refused_otherwise(
        tmp_path: Path) -> None:
    rows = [row.copy() for row in ROWS]
    path = _bytes(tmp_path / "eu.csv", _european(rows))
    (error,) = rejected(path).extra["errors"]
    assert "semicolons" in error["message"] and 'delimiter=";"' in error["allowed"]
    table = ingest.ingest_file(path, media_type=EUROPEAN, schema=SCHEMA)
    expected = ingest.ingest_file(write_csv(tmp_path / "t.csv", ROWS), media_type=ingest.CSV,
                                  schema=SCHEMA)
    assert np.array_equal(table.features, expected.features)
    assert table.fingerprint == expected.fingerprint


def test_decimal_commas_are_numbers_and_decimal_points_are_not(tmp_path: Path) -> None:
    document = {**SCHEMA.model_dump(mode="json")}
    document["features"][0] = {"name": "phq9", "kind": "numeric", "lower": 0, "upper": 27,
                               "reference": 5}
    schema = type(SCHEMA).model_validate(document)
    rows = [row.copy() for row in ROWS]
    rows[0][1], rows[1][1] = "3,5", " 2,5e1"
    table = ingest.ingest_file(_bytes(tmp_path / "a.csv", _european(rows)), media_type=EUROPEAN,
                               schema=schema)
    assert table.features[:2, 0].tolist() == [3.5, 25.0]
    rows[1][1] = "1.5"  # a decimal point where commas were declared
    error = rejected(_bytes(tmp_path / "b.csv", _european(rows)), schema, EUROPEAN)
    assert found(error) == [(2, "phq9", "not a number")]
    assert 'decimal=","' in error.extra["errors"][0]["allowed"]


def test_a_european_upload_reads_back_in_its_dialect(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept file's name records the dialect, so the stored table reads back (training)
    as it was accepted, while ``table_media_type`` stays the plain media type."""
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    source = _bytes(tmp_path / "eu.csv", _european(ROWS))
    pending = ingest.ingest_and_store(source, media_type=EUROPEAN, schema=SCHEMA,
                                      data_dir=settings.data_dir)
    kept = pending.commit()
    assert pending.media_type == "text/csv"
    assert kept.path.name == f"{kept.sha256}.delimiter-semicolon.decimal-comma.csv"
    dataset = Dataset(id=3, name="eu", source_kind="upload", n_rows=len(ROWS), seed=0,
                      schema_json=SCHEMA.model_dump(mode="json"), table_sha256=kept.sha256,
                      table_media_type=pending.media_type,
                      source_fingerprint=upload_fingerprint(pending.fingerprint))
    assert stored.table_path(dataset) == kept.path
    assert stored.load_table(dataset).fingerprint == pending.fingerprint


def test_a_name_differing_only_in_case_gets_a_did_you_mean(tmp_path: Path) -> None:
    header = ["Patient_ID", *HEADER[1:]]
    error = rejected(write_csv(tmp_path / "t.csv", ROWS, header))
    assert (None, "Patient_ID", "unexpected column: did you mean 'patient_id'?") in found(error)


def test_header_size_and_width_are_capped(tmp_path: Path) -> None:
    names = [f"c{i}" for i in range(settings.upload_max_columns + 1)]
    error = rejected(_bytes(tmp_path / "wide.csv", ",".join(names).encode() + b"\n"))
    assert found(error) == [(None, None, f"{len(names)} columns")]
    assert "upload_max_columns" in error.extra["errors"][0]["allowed"]
    long = ",".join(f"c{i:07d}" for i in range(349_525 // 4)).encode() + b"\n"
    (item,) = rejected(_bytes(tmp_path / "long.csv", long)).extra["errors"]
    limit = settings.upload_max_header_bytes
    assert item["message"] == f"the header line is longer than {limit} bytes"
    assert str(limit) in item["allowed"]


@pytest.mark.slow  # it times itself, which a loaded machine can stretch
def test_the_duplicate_column_check_is_linear(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """100,000 names (a quadratic check compares 10^10 pairs): well under a second."""
    monkeypatch.setattr(settings, "upload_max_header_bytes", 2 << 20)
    monkeypatch.setattr(settings, "upload_max_columns", 200_000)
    names = [f"c{i % 50_000}" for i in range(100_000)]
    path = _bytes(tmp_path / "t.csv", ",".join(names).encode() + b"\n")
    start = time.perf_counter()
    error = rejected(path)
    assert time.perf_counter() - start < 2.0
    assert error.extra["total"] == 50_000 + 5 + 50_000  # duplicated, missing, unexpected
    assert len(error.extra["errors"]) == 100


def test_fields_over_the_csv_module_limit_are_422s(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A header field over 128 KiB (the csv module's limit), a body field over it, and a line
    over Arrow's 1 MiB block: each a 422 naming its limit, never a 500."""
    monkeypatch.setattr(settings, "upload_max_header_bytes", 1 << 20)
    head = ("x" * 200_000 + "," + ",".join(HEADER) + "\n").encode()
    (item,) = rejected(_bytes(tmp_path / "h.csv", head)).extra["errors"]
    assert item["message"] == "a header field is longer than 131072 characters"
    body = write_csv(tmp_path / "b.csv", [*ROWS, ["q" * 200_000, "3", "male", "0", "1"]])
    assert found(rejected(body)) == [(6, "patient_id", "id too long")]
    line = write_csv(tmp_path / "l.csv", [*ROWS, ["q" * (2 << 20), "3", "male", "0", "1"]])
    (item,) = rejected(line).extra["errors"]
    assert item["message"].startswith("a line longer than 1048576 bytes")
    assert item["allowed"] == "lines of at most 1048576 bytes"


BAD_IDS = [  # (id, message)
    ("p\x001", "control or format character in the id"),
    ("p\x1b[2Jx", "control or format character in the id"),
    ("\u202egpj.exe", "control or format character in the id"),
    ("a\u200bb", "control or format character in the id"),
    ("=HYPERLINK(http://x)", "the id starts like a spreadsheet formula"),
    ("+cmd|' /C calc'!A0", "the id starts like a spreadsheet formula"),
    ("-2+3", "the id starts like a spreadsheet formula"),
    ("@SUM(A1)", "the id starts like a spreadsheet formula"),
]


@pytest.mark.parametrize(("value", "message"), BAD_IDS)
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_ids_a_spreadsheet_or_terminal_would_misread_are_refused(
        tmp_path: Path, fmt: str, value: str, message: str) -> None:
    rows = [row.copy() for row in ROWS]
    rows[2][0] = value
    if fmt == "csv":
        error = rejected(write_csv(tmp_path / "t.csv", rows))
    else:
        error = rejected(write_parquet(tmp_path / "t.parquet", rows), media=ingest.PARQUET)
    assert found(error) == [(3, "patient_id", message)]
    rule = TEXT_RULE if "control" in message else "a spreadsheet runs such a cell as a formula"
    assert rule in error.extra["errors"][0]["allowed"]


def test_newlines_in_parquet_ids_and_signed_numbers_as_ids(tmp_path: Path) -> None:
    rows = [row.copy() for row in ROWS]
    rows[0][0], rows[1][0], rows[3][0] = "-12", "+44", "p\n4"
    path = write_parquet(tmp_path / "t.parquet", rows)
    assert found(rejected(path, media=ingest.PARQUET)) == [
        (4, "patient_id", "control or format character in the id")]


def _register(client: TestClient) -> Any:
    from tests.datasets.test_upload_api import SCHEMA as API_SCHEMA

    body = {"name": "eu", "source": {"kind": "upload"}, "schema": API_SCHEMA,
            "privacy_budget": {"epsilon": 3, "delta": 1e-5}}
    created = client.post("/v1/datasets", json=body)
    assert created.status_code == 201, created.text
    return created.json()["id"]


def test_a_european_csv_through_the_api(client: TestClient, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.datasets.test_upload_api import _rows

    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    dataset_id = _register(client)
    rows = [row.split(",") for row in _rows(500, seed=21)]
    rows[0][1] += ",0"  # a whole number with a decimal comma
    sent = client.put(f"/v1/datasets/{dataset_id}/data", content=_european(rows),
                      headers={"Content-Type": "text/csv"})
    assert "semicolons" in problem(sent, 422)["errors"][0]["message"]
    answer = client.put(f"/v1/datasets/{dataset_id}/data", content=_european(rows),
                        headers={"Content-Type": EUROPEAN})
    assert answer.status_code == 200, answer.text
    with get_database().session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None and dataset.table_media_type == "text/csv"
        assert stored.load_table(dataset).n_rows == 500
