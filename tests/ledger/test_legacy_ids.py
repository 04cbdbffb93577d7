"""A data steward declares the patient ids of an upload registered before patient spaces
without an id column: its patients join the organisation's space with the spend they had, its
parts stay where they were, and a table of the same patients uploaded again shares their
budget."""

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.auth.models import AuditEvent
from app.core.database import Database
from app.core.settings import settings
from app.datasets import parts
from app.datasets.models import Dataset
from app.datasets.patients import patient_ids
from app.ledger import spaces
from tests.ledger.test_legacy_spaces import (
    _per_patient,
    _ready_legacy,
    _space_of,
    _verified,
)
from tests.ledger.test_patient_budget import SCHEMA, _job, _upload

NO_IDS = {**SCHEMA, "id_column": None}


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")


def _ids_csv(ids: list[str], header: str = "patient_id") -> bytes:
    return ("\n".join([header, *ids]) + "\n").encode()


def _declare(client: TestClient, dataset_id: int, body: bytes, key: str | None = None):  # type: ignore[no-untyped-def]
    headers = {"Content-Type": "text/csv"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return client.put(f"/v1/datasets/{dataset_id}/patient-ids", content=body, headers=headers)


def _split(db: Database, dataset_id: int) -> list[np.ndarray]:
    with db.session_scope() as session:
        dataset = session.get(Dataset, dataset_id)
        assert dataset is not None
        split = parts.load_parts(dataset)
        return [split.train.y, split.calibration.y, split.evaluation.y]


def test_declared_ids_fold_a_legacy_dataset_with_its_spend(any_client: TestClient,
                                                           any_db: Database,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [f"q-{i}" for i in range(3000)]
    legacy, own_space = _ready_legacy(any_client, any_db, ids, NO_IDS)
    with monkeypatch.context() as before_this_code:  # spend from before the rule
        before_this_code.setattr(spaces, "check_keyed", lambda **_: None)
        assert _job(any_client, legacy, 7.9).status_code == 202
    refused = _job(any_client, legacy, 1.0)
    assert refused.status_code == 409 and "PUT /v1/datasets/" in refused.json()["detail"]
    before = _split(any_db, legacy)

    declared = _declare(any_client, legacy, _ids_csv(ids))
    assert declared.status_code == 200, declared.text
    assert declared.json()["patients"]["patients"] == 3000
    organisation = _space_of(any_db, legacy)
    assert organisation != own_space
    assert [np.array_equal(a, b) for a, b in zip(before, _split(any_db, legacy), strict=True)] \
        == [True, True, True]  # no row moved between parts
    _verified(any_db, organisation, own_space)
    again = _declare(any_client, legacy, _ids_csv(ids))
    assert again.status_code == 409 and again.json()["type"].endswith("/patient-ids-not-awaited")

    re_export = _upload(any_client, ids, "re-export", seed=1)
    second = _job(any_client, re_export, 7.9)
    assert second.status_code in (202, 409), second.text
    spend = _per_patient(any_db, organisation)
    assert set(spend) == {(legacy, re_export)}
    filtered, pld, read = spend[(legacy, re_export)]
    assert read == 1 and filtered <= 8.0 and pld <= 8.0, spend  # the legacy job, once
    with any_db.session_scope() as session:
        actions = session.scalars(select(AuditEvent.action)).all()
        assert "dataset.patient_ids_declared" in actions


@pytest.mark.parametrize(("body", "message"), [
    (_ids_csv([f"q-{i}" for i in range(499)]), "499 ids for 500 rows"),
    (_ids_csv([f"q-{i}" for i in range(499)] + ["q-0"]), "duplicate id"),
    (_ids_csv([f"q-{i}" for i in range(499)] + ["=cmd()"]), "formula"),
    (b"patient_id,other\n" + b"".join(f"q-{i},1\n".encode() for i in range(500)),
     "one-column"),
])
def test_a_bad_id_list_is_a_422_and_keeps_nothing(client: TestClient, db: Database,
                                                  body: bytes, message: str) -> None:
    legacy, own_space = _ready_legacy(client, db, [f"r-{i}" for i in range(500)], NO_IDS)
    answer = _declare(client, legacy, body)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert message in answer.text
    assert _space_of(db, legacy) == own_space
    with db.session_scope() as session:
        dataset = session.get(Dataset, legacy)
        assert dataset is not None and dataset.patient_ids_sha256 is None
    assert not list(settings.data_dir.glob(f"*{patient_ids.SUFFIX}"))


def test_only_a_legacy_upload_without_ids_takes_them(client: TestClient, db: Database) -> None:
    keyed = _upload(client, [f"s-{i}" for i in range(300)], "keyed")
    answer = _declare(client, keyed, _ids_csv([f"s-{i}" for i in range(300)]))
    assert answer.status_code == 409
    assert answer.json()["type"].endswith("/patient-ids-not-awaited")


def test_a_body_longer_than_the_rows_can_need_is_a_413(client: TestClient, db: Database) -> None:
    legacy, _ = _ready_legacy(client, db, [f"t-{i}" for i in range(300)], NO_IDS)
    answer = _declare(client, legacy, b"patient_id\n" + b"x" * patient_ids.max_body_bytes(300))
    assert answer.status_code == 413, answer.text
