"""Files as clinics export them: columns the schema does not declare, ignored when the schema
says so (never read nor kept, named in the answer), and Parquet sent as
``application/octet-stream``, told by its magic bytes."""

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.core.database import get_database
from app.core.errors import UnsupportedMediaType
from app.core.settings import settings
from app.datasets.intake import ingest, projection, table_format
from app.datasets.intake.stored import load_table
from app.datasets.models import Dataset
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from tests.api.scoring_helpers import problem
from tests.datasets.test_ingest import HEADER, ROWS, SCHEMA, found, rejected, write_csv
from tests.datasets.test_upload_api import SCHEMA as API_SCHEMA
from tests.datasets.test_upload_api import _rows

IGNORING = SCHEMA.model_copy(update={"extra_columns": "ignore"})
SECRET = "Jane Doe; 12 Elm St"  # a value of an ignored column: never kept


def _with_notes(rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    return ["notes", *HEADER, "mrn"], [[SECRET, *row, f"m{i}"] for i, row in enumerate(rows)]


def _parquet(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    pq.write_table(pa.table({name: [row[j] for row in rows] for j, name in enumerate(header)}),
                   path)
    return path


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_extra_columns_are_refused_by_default_and_ignored_when_declared(
        tmp_path: Path, fmt: str) -> None:
    header, rows = _with_notes(ROWS)
    if fmt == "csv":
        path = tmp_path / "t.csv"
        path.write_text("\n".join([",".join(header), *(",".join(f'"{v}"' for v in row)
                                                         for row in rows)]) + "\n")
        plain, media = write_csv(tmp_path / "plain.csv", ROWS), ingest.CSV
    else:
        path, media = _parquet(tmp_path / "t.parquet", header, rows), ingest.PARQUET
        plain = _parquet(tmp_path / "plain.parquet", HEADER, ROWS)
    assert sorted(m for _, _, m in found(rejected(path, media=media))) == [
        "unexpected column", "unexpected column"]
    table = ingest.ingest_file(path, media_type=media, schema=IGNORING)
    expected = ingest.ingest_file(plain, media_type=media, schema=SCHEMA)
    assert np.array_equal(table.features, expected.features)
    assert table.fingerprint == expected.fingerprint
    pending = ingest.ingest_and_store(path, media_type=media, schema=IGNORING,
                                      data_dir=tmp_path / "data")
    assert pending.ignored == ("notes", "mrn")
    assert pending.source == projection.projected_path(path)
    assert SECRET.encode() not in pending.source.read_bytes()
    assert pending.sha256 == hashlib.sha256(pending.source.read_bytes()).hexdigest()
    kept = ingest.ingest_file(pending.source, media_type=media, schema=SCHEMA)
    assert kept.fingerprint == expected.fingerprint


def test_an_ignored_column_never_hides_a_misspelt_or_missing_one(tmp_path: Path) -> None:
    header = ["Phq9" if name == "phq9" else name for name in HEADER] + ["notes"]
    path = write_csv(tmp_path / "t.csv", [[*row, "x"] for row in ROWS], header=header)
    assert sorted((c, m) for _, c, m in found(rejected(path, IGNORING))) == [
        ("Phq9", "unexpected column: did you mean 'phq9'?"), ("phq9", "missing column")]


def test_the_option_does_not_change_what_a_model_reads() -> None:
    assert schema_hash(IGNORING) == schema_hash(SCHEMA)
    with pytest.raises(ValueError, match="extra_columns"):
        DatasetSchema.model_validate({**SCHEMA.model_dump(), "extra_columns": "keep"})


def test_parquet_is_told_by_its_magic_bytes(tmp_path: Path) -> None:
    parquet = _parquet(tmp_path / "t.parquet", HEADER, ROWS)
    octets = "application/octet-stream"
    assert table_format.format_of_body(octets, parquet).media_type == ingest.PARQUET
    for name, data in (("csv", b"patient_id,phq9\n"), ("short", b"PAR1"),
                       ("head", b"PAR1" + b"\0" * 20)):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(UnsupportedMediaType, match="magic bytes"):
            table_format.format_of_body(octets, tmp_path / name)
    assert table_format.format_of_body("text/csv", tmp_path / "csv").media_type == ingest.CSV


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _register(client: TestClient, **schema: Any) -> int:
    body = {"name": "clinic", "source": {"kind": "upload"},
            "schema": {**API_SCHEMA, **schema}, "privacy_budget": {"epsilon": 3, "delta": 1e-5}}
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def _put(client: TestClient, dataset_id: int, body: bytes, media: str) -> Any:
    return client.put(f"/v1/datasets/{dataset_id}/data", content=body,
                      headers={"Content-Type": media})


def test_an_upload_names_the_columns_it_ignored_and_keeps_none(
        any_client: TestClient, data_dir: Path) -> None:
    dataset_id = _register(any_client, extra_columns="ignore")
    lines = [f'"{SECRET}",{row}' for row in _rows(1200, seed=4)]
    body = ("\n".join(["notes,patient_id,phq9,sex,prior_crisis,crisis_30d", *lines])
            + "\n").encode()
    answer = _put(any_client, dataset_id, body, "text/csv")
    assert answer.status_code == 200, answer.text
    assert answer.json()["ignored_columns"] == ["notes"] and answer.json()["rows"] == 1200
    assert any_client.get(f"/v1/datasets/{dataset_id}").json()["ignored_columns"] == ["notes"]
    kept = [p for p in data_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    assert len(kept) == 1 and SECRET.encode() not in kept[0].read_bytes()
    assert not [p for p in data_dir.iterdir() if p.name.startswith(".spool-")]
    with get_database().session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None and load_table(dataset).n_rows == 1200
    refusing = _register(any_client)
    problem(_put(any_client, refusing, body, "text/csv"), 422)


def test_parquet_under_octet_stream_loads_and_a_csv_under_it_is_415(
        any_client: TestClient, data_dir: Path) -> None:
    dataset_id = _register(any_client)
    rows = [r.split(",") for r in _rows(1200, seed=5)]
    buffer = io.BytesIO()
    pq.write_table(pa.table({name: [r[j] for r in rows] for j, name in enumerate(
        ["patient_id", "phq9", "sex", "prior_crisis", "crisis_30d"])}), buffer)
    csv = ("\n".join(["patient_id,phq9,sex,prior_crisis,crisis_30d",
                      *(",".join(r) for r in rows)]) + "\n").encode()
    problem(_put(any_client, dataset_id, csv, "application/octet-stream"), 415,
            field="Content-Type")
    assert any_client.get(f"/v1/datasets/{dataset_id}").json()["state"] == "awaiting_data"
    answer = _put(any_client, dataset_id, buffer.getvalue(), "application/octet-stream")
    assert answer.status_code == 200, answer.text
    with get_database().session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None and dataset.table_media_type == ingest.PARQUET
