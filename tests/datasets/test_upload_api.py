"""Uploads through the API: register a schema, PUT the rows (CSV or Parquet), erase them."""

import hashlib
import io
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from app.core.database import get_database
from app.core.settings import settings
from app.datasets import record_coins
from app.datasets.intake.stored import StoredTableMismatch, load_table
from app.datasets.models import Dataset
from app.datasets.parts import load_parts
from app.datasets.patients import index_segments
from app.datasets.schemas import same_rows_warning
from tests.api.scoring_helpers import problem
from tests.datasets.test_dataset_schema import CONTRACT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

# The contract schema, with a feature whose missing values take the reference.
SCHEMA = {**CONTRACT, "features": [*CONTRACT["features"][:2],
                                   {**CONTRACT["features"][2], "missing": "reference"}]}
HEADER = "patient_id,phq9,sex,prior_crisis,crisis_30d"


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _rows(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    sexes = ["female", "male", "other"]
    return [f"p{seed}-{i},{rng.integers(0, 28)},{sexes[rng.integers(0, 3)]},"
            f"{rng.integers(0, 2)},{int(rng.random() < 0.3)}" for i in range(n)]


def _csv(rows: list[str]) -> bytes:
    return ("\n".join([HEADER, *rows]) + "\n").encode()


def _register(client: TestClient, **changes: Any) -> dict[str, Any]:
    body = {"name": "clinic", "source": {"kind": "upload"}, "schema": SCHEMA,
            "privacy_budget": {"epsilon": 3, "delta": 1e-5}, **changes}
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def _put(client: TestClient, dataset_id: int, body: bytes,
         media: str = "text/csv") -> Any:
    return client.put(f"/v1/datasets/{dataset_id}/data", content=body,
                      headers={"Content-Type": media})


def test_register_then_upload_csv_makes_the_dataset_ready(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    created = _register(client)
    assert created["state"] == "awaiting_data" and created["source"]["n_rows"] is None
    assert created["schema"]["id_column"] == "patient_id"
    rows = _rows(2000)
    rows[3] = rows[3].rsplit(",", 2)[0] + ",,0"  # a missing prior_crisis: imputed
    answer = _put(client, created["id"], _csv(rows))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["state"] == "ready" and body["rows"] == 2000
    assert body["training_rows"] + body["calibration_rows"] + body["evaluation_rows"] == 2000
    assert body["imputed"]["prior_crisis"] == 1 and sum(body["imputed"].values()) == 1
    again = client.get(f"/v1/datasets/{created['id']}").json()
    assert again["imputed"] == body["imputed"]  # the tables' holders read their intake facts
    scientist = client_as("data_scientist").get(f"/v1/datasets/{created['id']}").json()
    assert scientist["imputed"] is None  # an exact count: never to a data scientist
    problem(_put(client, created["id"], _csv(rows)), 409, field="dataset_id")


def test_the_same_rows_in_another_order_share_their_patients_spend(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    """A private re-upload into the organisation's space is no second budget
    (its patients are the same patients, keyed into one space), so it is accepted; only its
    steward is told that its rows equal an earlier dataset's."""
    rows = _rows(1500, seed=1)
    first = _register(client)
    assert _put(client, first["id"], _csv(rows)).status_code == 200
    second = _register(client, name="twin")
    answer = _put(client_as("data_steward"), second["id"], _csv(rows[::-1]))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["warnings"] == [same_rows_warning(first["id"])]
    assert body["patients"] == {"patients": 1500, "already_known": 1500, "new": 0,
                                "shared_with": {str(first["id"]): 1500}}
    scientist = client_as("data_scientist").get(f"/v1/datasets/{second['id']}").json()
    assert scientist["warnings"] is None and scientist["patients"] is None
    assert client.get(f"/v1/datasets/{first['id']}").json()["warnings"] == []
    with get_database().session_scope() as session:  # the twin's rows read back as accepted
        twin = session.get(Dataset, second["id"])
        assert twin is not None and load_table(twin).n_rows == 1500


def test_a_twin_of_the_same_bytes_shares_the_file_and_an_erasure_leaves_the_other(
    client: TestClient, _data_dir: Path
) -> None:
    """The twin's file has the first's name (same bytes): both keep it, and erasing one
    dataset's rows leaves the other's."""
    rows = _rows(1500, seed=6)
    first = _register(client)
    assert _put(client, first["id"], _csv(rows)).status_code == 200
    stored = sorted(p.name for p in _kept(_data_dir))
    twin = _register(client, name="twin")
    assert _put(client, twin["id"], _csv(rows)).status_code == 200
    assert sorted(p.name for p in _kept(_data_dir)) == stored
    assert _no_temporary_files(_data_dir)
    assert client.delete(f"/v1/datasets/{twin['id']}/data").status_code == 200
    assert sorted(p.name for p in _kept(_data_dir)) == stored
    with get_database().session_scope() as session:
        kept = session.get(Dataset, first["id"])
        assert kept is not None and load_table(kept).n_rows == 1500
    assert client.delete(f"/v1/datasets/{first['id']}/data").status_code == 200
    assert not _kept(_data_dir)


def test_a_private_tables_rows_made_public_are_still_refused(client: TestClient) -> None:
    """A public upload has no budget at all: a private table's rows uploaded as public (or a
    public table's uploaded as private) are refused, naming the dataset, as before."""
    rows = _rows(1500, seed=7)
    private = _register(client)
    assert _put(client, private["id"], _csv(rows)).status_code == 200
    public = _register(client, name="public", public=True, privacy_budget=None)
    body = problem(_put(client, public["id"], _csv(rows[::-1])), 409, field="source")
    assert body["existing_dataset_id"] == private["id"]
    published = _register(client, name="published", public=True, privacy_budget=None)
    assert _put(client, published["id"], _csv(_rows(1500, seed=9))).status_code == 200
    again = _register(client, name="made-private")
    body = problem(_put(client, again["id"], _csv(_rows(1500, seed=9))), 409, field="source")
    assert body["existing_dataset_id"] == published["id"]


def _no_temporary_files(data_dir: Path) -> bool:
    return not [p for p in data_dir.iterdir() if p.name.startswith((".upload-", ".keep-"))]


def _kept(data_dir: Path) -> list[Path]:
    """The tables the service keeps (named by their bytes; not the dot-named spools, nor the
    organisation's patient index, which outlives an erasure as the ledger does)."""
    return [p for p in data_dir.glob("*")
            if not p.name.startswith(".") and p.name != "patients"]


def test_parquet_upload(client: TestClient) -> None:
    created = _register(client)
    rows = [r.split(",") for r in _rows(1200, seed=2)]
    table = pa.table({
        "patient_id": [r[0] for r in rows], "phq9": [int(r[1]) for r in rows],
        "sex": [r[2] for r in rows], "prior_crisis": [int(r[3]) for r in rows],
        "crisis_30d": [int(r[4]) for r in rows]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    answer = _put(client, created["id"], buffer.getvalue(), "application/vnd.apache.parquet")
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == 1200


def test_a_bad_table_names_rows_and_columns_and_stores_nothing(
    client: TestClient, _data_dir: Path
) -> None:
    created = _register(client)
    rows = _rows(1000, seed=3)
    rows[9] = rows[9].replace(",", ",99,", 1).split(",99,")[0] + ",99," + ",".join(
        rows[9].split(",")[2:])  # phq9 = 99
    body = problem(_put(client, created["id"], _csv(rows)), 422)
    assert body["total"] >= 1
    assert {"row": 10, "column": "phq9"}.items() <= body["errors"][0].items()
    assert client.get(f"/v1/datasets/{created['id']}").json()["state"] == "awaiting_data"
    assert not _kept(_data_dir) and _no_temporary_files(_data_dir)


def test_delta_is_checked_against_the_uploaded_rows(
    client: TestClient, _data_dir: Path
) -> None:
    created = _register(client, privacy_budget={"epsilon": 3, "delta": 1e-4})
    body = problem(_put(client, created["id"], _csv(_rows(2000, seed=4))), 422,
                   field="privacy_budget.delta")
    assert "1/(10 n_rows)" in body["detail"]
    assert not _kept(_data_dir) and _no_temporary_files(_data_dir)


def test_jobs_wait_for_rows_and_erasure_keeps_the_ledger(
    client: TestClient, _data_dir: Path
) -> None:
    created = _register(client)
    job = {"dataset_id": created["id"], "privacy": {"target_epsilon": 1},
           "training": {"epochs": 2, "batch_size": 128}}
    problem(client.post("/v1/jobs", json=job), 409, field="dataset_id")
    assert _put(client, created["id"], _csv(_rows(2000, seed=5))).status_code == 200
    assert _kept(_data_dir)
    erased = client.delete(f"/v1/datasets/{created['id']}/data")
    assert erased.status_code == 200, erased.text
    assert erased.json()["state"] == "erased" and erased.json()["data_erased_at"]
    assert not _kept(_data_dir)
    problem(client.post("/v1/jobs", json=job), 409, field="dataset_id")
    report = client.get(f"/v1/datasets/{created['id']}/privacy-report")
    assert report.status_code == 200
    # The patient index stays: the erased rows come back sharing their patients' spend (no
    # fresh budget), and the steward is told.
    other = _register(client, name="again")
    again = _put(client, other["id"], _csv(_rows(2000, seed=5)))
    assert again.status_code == 200, again.text
    assert again.json()["warnings"] == [same_rows_warning(created["id"])]
    assert again.json()["patients"]["already_known"] == 2000


def test_schema_rules_at_registration(client: TestClient) -> None:
    synthetic_with_schema = {"name": "s", "source": {"kind": "synthetic", "n_rows": 500},
                             "schema": SCHEMA, "privacy_budget": {"epsilon": 1, "delta": 1e-5}}
    problem(client.post("/v1/datasets", json=synthetic_with_schema), 422, field="schema")
    no_schema = {"name": "u", "source": {"kind": "upload"},
                 "privacy_budget": {"epsilon": 1, "delta": 1e-5}}
    problem(client.post("/v1/datasets", json=no_schema), 422, field="schema")
    bad = {**SCHEMA, "features": [{**SCHEMA["features"][0], "lower": 30}, *SCHEMA["features"][1:]]}
    response = client.post("/v1/datasets", json={**no_schema, "schema": bad})
    assert response.status_code == 422 and "features[0]" in response.text


def _outcome(**changes: Any) -> dict[str, Any]:
    """SCHEMA's outcome with ``changes`` (a value of None removes the key)."""
    outcome = {**SCHEMA["outcome"], **changes}
    return {**SCHEMA, "outcome": {k: v for k, v in outcome.items() if v is not None}}


BANDS_RULE = '{"low_medium": p1, "medium_high": p2}, 0 < p1 < p2 < 1'
OUTCOME_REFUSALS = [  # (schema, field named, allowed)
    (_outcome(label=None), "schema.outcome.label", "1 to 200 printable characters"),
    (_outcome(bands=None), "schema.outcome.bands", BANDS_RULE),
    (_outcome(bands={"low_medium": 0.3, "medium_high": 0.1}),
     "schema.outcome.bands.medium_high", "(0.3, 1)"),
    (_outcome(bands={"low_medium": 0.2, "medium_high": 0.2}),
     "schema.outcome.bands.medium_high", "(0.2, 1)"),
    (_outcome(bands={"low_medium": 0, "medium_high": 0.3}),
     "schema.outcome.bands.low_medium", "(0, 1)"),
    (_outcome(bands={"low_medium": -0.1, "medium_high": 0.3}),
     "schema.outcome.bands.low_medium", "(0, 1)"),
    (_outcome(bands={"low_medium": 0.1, "medium_high": 1}),
     "schema.outcome.bands.medium_high", "(0, 1)"),
    (_outcome(bands={"low_medium": 0.1}), "schema.outcome.bands.medium_high", "(0, 1)"),
]


@pytest.mark.parametrize(("schema", "field", "allowed"), OUTCOME_REFUSALS,
                         ids=[f"{f}:{i}" for i, (_, f, _a) in enumerate(OUTCOME_REFUSALS)])
def test_an_upload_must_label_its_outcome_and_declare_its_bands(
    client: TestClient, schema: dict[str, Any], field: str, allowed: str
) -> None:
    """A 422 naming the field and its range, and no dataset, budget or ledger is created."""
    before = client.get("/v1/datasets").json()["total"]
    body = {"name": "clinic", "source": {"kind": "upload"}, "schema": schema,
            "privacy_budget": {"epsilon": 3, "delta": 1e-5}}
    problem(client.post("/v1/datasets", json=body), 422, field=field, allowed=allowed)
    assert client.get("/v1/datasets").json()["total"] == before
    assert client.post("/v1/datasets", json={**body, "schema": SCHEMA}).status_code == 201


def test_the_synthetic_generator_declares_the_crisis_schema(client: TestClient) -> None:
    response = client.post("/v1/datasets", json={
        "name": "gen", "source": {"kind": "synthetic", "n_rows": 500, "seed": 901},
        "privacy_budget": {"epsilon": 1, "delta": 1e-5}})
    schema = response.json()["schema"]
    assert [f["name"] for f in schema["features"]] == [
        "age", "phq9", "gaf", "num_sessions", "substance_use", "prior_crisis"]
    assert schema["subgroups"] == ["sex"]


def test_an_upload_over_the_limit_is_413(client: TestClient,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    created = _register(client)
    monkeypatch.setattr(settings, "max_upload_bytes", 10_000)
    response = _put(client, created["id"], _csv(_rows(2000, seed=6)))
    assert response.status_code == 413, response.text


@pytest.mark.parametrize("with_ids", [True, False])
def test_the_parts_counted_at_upload_are_the_parts_training_reads(
    client: TestClient, with_ids: bool
) -> None:
    """The upload counts the parts from the keyed words it found duplicates with; the worker
    recomputes them from the stored ids (app.datasets.parts): the two must agree, with or
    without an id column (then the ids are row numbers)."""
    schema = SCHEMA if with_ids else {**SCHEMA, "id_column": None}
    # A private upload needs its ids (the patient budget): without them, a public table.
    created = _register(client, schema=schema) if with_ids else _register(
        client, schema=schema, public=True, privacy_budget=None)
    rows = _rows(3000, seed=8)
    body = _csv(rows) if with_ids else (
        "\n".join([HEADER.split(",", 1)[1], *(r.split(",", 1)[1] for r in rows)]) + "\n"
    ).encode()
    answer = _put(client, created["id"], body)
    assert answer.status_code == 200, answer.text
    with get_database().session_scope() as session:
        dataset = session.get(Dataset, created["id"])
        assert dataset is not None and dataset.coin_scheme == record_coins.AES_V2
        split = load_parts(dataset)
        assert (len(split.train.y), len(split.calibration.y), len(split.evaluation.y)) == (
            answer.json()["training_rows"], answer.json()["calibration_rows"],
            answer.json()["evaluation_rows"])


def test_duplicate_ids_are_found_with_the_keyed_words(client: TestClient) -> None:
    created = _register(client)
    rows = _rows(2500, seed=9)
    rows[2000] = "p9-17" + rows[2000][rows[2000].index(","):]
    body = problem(_put(client, created["id"], _csv(rows)), 422)
    assert [(e["row"], e["message"]) for e in body["errors"]] == [
        (18, "duplicate id"), (2001, "duplicate id")]


def test_the_kept_table_is_the_clinics_file_and_an_edited_one_is_refused(
    client: TestClient, _data_dir: Path
) -> None:
    """The stored table is the body as sent, named by its SHA-256 (the clinic can check it
    with sha256sum); it reads back as the accepted rows, and once edited (bytes, or bytes and
    name together) it is refused rather than trained on."""
    created = _register(client)
    body = _csv(_rows(2000, seed=9))
    assert _put(client, created["id"], body).status_code == 200
    (kept,) = _kept(_data_dir)
    assert kept.name == f"{hashlib.sha256(body).hexdigest()}.csv"
    assert kept.read_bytes() == body
    with get_database().session_scope() as session:
        dataset = session.get(Dataset, created["id"])
        assert dataset is not None and dataset.table_media_type == "text/csv"
        assert load_table(dataset).n_rows == 2000
        kept.write_bytes(body.replace(b",1\n", b",0\n", 1))
        with pytest.raises(StoredTableMismatch, match="do not match"):
            load_table(dataset)
        edited = body.replace(b",1\n", b",0\n", 1)  # a valid table, other rows
        renamed = _data_dir / f"{hashlib.sha256(edited).hexdigest()}.csv"
        renamed.write_bytes(edited)
        dataset.table_sha256 = renamed.name.split(".")[0]
        with pytest.raises(StoredTableMismatch, match="no longer reads"):
            load_table(dataset)
        session.rollback()


def test_an_uploads_patient_lookup_begins_once_its_rows_are_valid_and_is_not_made_again(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookup of a re-upload's patients starts as soon as its rules held, before the
    accept (``uploads.receive``, on the lookup threads), in the index this process last saw:
    the accept's ``add_dataset`` uses it under the space lock instead of searching again."""
    rows = _rows(1200, seed=4)
    first = _register(client)
    assert _put(client, first["id"], _csv(rows[:800])).status_code == 200
    searches: list[tuple[int, str]] = []
    search = index_segments.Index.blocks_of

    def counted(index: index_segments.Index, words: np.ndarray) -> Any:
        searches.append((len(words), threading.current_thread().name))
        return search(index, words)

    monkeypatch.setattr(index_segments.Index, "blocks_of", counted)
    second = _register(client, name="follow-up")
    answer = _put(client, second["id"], _csv(rows[400:]))
    assert answer.status_code == 200, answer.text
    assert answer.json()["patients"] == {"patients": 800, "already_known": 400, "new": 400,
                                         "shared_with": {str(first["id"]): 400}}
    assert [count for count, _ in searches] == [800]
    assert searches[0][1].startswith("patient-lookup")
