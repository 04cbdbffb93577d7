"""Every rule a file breaks, reported in one pass: value rules, duplicate ids and the outcome's
classes together, with the exact count, and ``complete`` only when the list is all of it."""

import copy
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from app.datasets.intake import ingest
from tests.api.scoring_helpers import problem
from tests.datasets.test_ingest import (
    HEADER,
    ROWS,
    found,
    rejected,
    write_csv,
    write_parquet,
)
from tests.datasets.test_upload_api import SCHEMA as API_SCHEMA


def _three_rules_broken() -> list[list[str]]:
    """Row 2: phq9 out of bounds; rows 1 and 4: one id; row 5: a missing value."""
    rows = copy.deepcopy(ROWS)
    rows[1][HEADER.index("phq9")] = "28"
    rows[3][HEADER.index("patient_id")] = "p1"
    rows[4][HEADER.index("sex")] = ""
    return rows


EXPECTED = [(1, "patient_id", "duplicate id"), (2, "phq9", "outside the declared bounds"),
            (4, "patient_id", "duplicate id"), (5, "sex", "missing value")]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_out_of_range_value_a_duplicate_id_and_a_missing_value_together(
        tmp_path: Path, fmt: str) -> None:
    rows = _three_rules_broken()
    if fmt == "csv":
        error = rejected(write_csv(tmp_path / "t.csv", rows))
    else:
        error = rejected(write_parquet(tmp_path / "t.parquet", rows), media=ingest.PARQUET)
    assert sorted(found(error)) == EXPECTED
    assert error.extra["total"] == 4 and error.extra["complete"] is True


def test_an_id_that_broke_its_own_rule_is_not_a_duplicate(tmp_path: Path) -> None:
    rows = copy.deepcopy(ROWS)
    rows[0][HEADER.index("phq9")] = "x"
    rows[1][0] = rows[2][0] = ""  # two missing ids: two errors, no duplicate
    error = rejected(write_csv(tmp_path / "t.csv", rows))
    assert sorted(found(error)) == [(1, "phq9", "not a number"), (2, "patient_id", "missing id"),
                                    (3, "patient_id", "missing id")]


def test_duplicate_rows_are_numbered_past_a_broken_line(tmp_path: Path) -> None:
    rows = copy.deepcopy(ROWS)
    rows[1] = ["p2", "12", "female", "1"]  # 4 fields: dropped, still row 2
    rows[4][0] = "p3"
    assert found(rejected(write_csv(tmp_path / "t.csv", rows))) == [
        (2, None, "4 fields instead of 5"), (3, "patient_id", "duplicate id"),
        (5, "patient_id", "duplicate id")]


def test_a_single_class_is_reported_beside_other_errors_and_undecided_when_unsure(
        tmp_path: Path) -> None:
    one_class = [row[:4] + ["0"] for row in ROWS]
    one_class[0][1] = "99"
    error = rejected(write_csv(tmp_path / "a.csv", one_class))
    assert found(error) == [(1, "phq9", "outside the declared bounds"),
                            (None, "crisis_30d", "the outcome has a single class")]
    assert error.extra["complete"] is True
    one_class[1][4] = "7"  # once corrected, this outcome may be the other class
    error = rejected(write_csv(tmp_path / "b.csv", one_class))
    assert sorted(found(error)) == [(1, "phq9", "outside the declared bounds"),
                                    (2, "crisis_30d", "not 0 or 1")]
    assert error.extra["total"] == 2 and error.extra["complete"] is False


def test_complete_only_when_every_error_is_listed(tmp_path: Path) -> None:
    rows = [[f"p{i % 60}", "99", "male", "0", str(i % 2)] for i in range(120)]
    error = rejected(write_csv(tmp_path / "t.csv", rows))
    assert error.extra["total"] == 240 and len(error.extra["errors"]) == 100
    assert error.extra["complete"] is False


def _register(client: TestClient) -> dict[str, Any]:
    body = {"name": "clinic", "source": {"kind": "upload"}, "schema": API_SCHEMA,
            "privacy_budget": {"epsilon": 3, "delta": 1e-5}}
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def test_the_upload_answers_every_rule_broken(any_client: TestClient, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    created = _register(any_client)
    body = write_csv(tmp_path / "t.csv", _three_rules_broken()).read_bytes()
    answer = problem(any_client.put(f"/v1/datasets/{created['id']}/data", content=body,
                                    headers={"Content-Type": "text/csv"}), 422)
    assert sorted((e["row"], e["column"], e["message"]) for e in answer["errors"]) == EXPECTED
    assert answer["error_count"] == answer["total"] == 4 and answer["complete"] is True
