"""Patient identity that means what it says: the schema's ``id_kind`` gives each id one
canonical text (CSV "007" and a Parquet 7 are one patient only under "integer"), each patient
space keys its ids by the scheme it recorded when made (a newer scheme cannot split its
patients), and two ids of one upload whose digests collide are one patient, charged together."""

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.database import get_database
from app.core.errors import InvalidRequest
from app.core.settings import settings as app_settings
from app.datasets import record_coins
from app.datasets.intake import id_rules
from app.datasets.intake.error_log import BatchRows, ErrorLog
from app.datasets.intake.stored import load_table
from app.datasets.models import Dataset
from app.datasets.patients import index_files, left_out_rows, patient_index
from app.datasets.schema.checks import check_schema
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from app.ledger import spaces
from app.ledger.left_out import LeftOut
from tests.api.scoring_helpers import problem
from tests.datasets.test_dataset_schema import CONTRACT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

PARQUET = "application/vnd.apache.parquet"
HEADER = "patient_id,phq9,sex,prior_crisis,crisis_30d"


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(app_settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _columns(n: int, seed: int) -> dict[str, list[Any]]:
    rng = np.random.default_rng(seed)
    return {"phq9": rng.integers(0, 28, n).tolist(),
            "sex": rng.choice(["female", "male", "other"], n).tolist(),
            "prior_crisis": rng.integers(0, 2, n).tolist(),
            "crisis_30d": (rng.random(n) < 0.3).astype(int).tolist()}


def _csv(ids: list[str], seed: int = 0) -> bytes:
    values = _columns(len(ids), seed)
    lines = [",".join([pid, *(str(values[c][i]) for c in HEADER.split(",")[1:])])
             for i, pid in enumerate(ids)]
    return ("\n".join([HEADER, *lines]) + "\n").encode()


def _parquet(ids: list[Any], seed: int = 0, id_type: pa.DataType | None = None) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"patient_id": pa.array(ids, id_type), **_columns(len(ids), seed)}),
                   buffer)
    return buffer.getvalue()


def _register(client: TestClient, kind: str | None = None, name: str = "clinic") -> int:
    schema = {**CONTRACT, **({} if kind is None else {"id_kind": kind})}
    response = client.post("/v1/datasets", json={
        "name": name, "source": {"kind": "upload"}, "schema": schema,
        "privacy_budget": {"epsilon": 3, "delta": 1e-5}})
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def _put(client: TestClient, dataset_id: int, body: bytes, media: str = "text/csv") -> Any:
    return client.put(f"/v1/datasets/{dataset_id}/data", content=body,
                      headers={"Content-Type": media})


@pytest.mark.parametrize(("kind", "known"), [("integer", 800), ("text", 0), (None, 0)])
def test_csv_007_and_parquet_7_are_one_patient_only_under_integer(
        client: TestClient, kind: str | None, known: int) -> None:
    """The steward's overlap figures of the second table: under "integer" every zero-padded
    CSV id is the Parquet integer's patient; as text (the default) they are others."""
    padded = _register(client, kind)
    assert client.get(f"/v1/datasets/{padded}").json()["schema"]["id_kind"] == (kind or "text")
    sent = _put(client, padded, _csv([f"{i:05d}" for i in range(1, 801)], seed=1))
    assert sent.status_code == 200, sent.text
    numbers = _register(client, kind, name="clinic-parquet")
    answer = _put(client, numbers, _parquet(list(range(1, 801)), seed=2), PARQUET)
    assert answer.status_code == 200, answer.text
    assert answer.json()["patients"] == {
        "patients": 800, "already_known": known, "new": 800 - known,
        "shared_with": {str(padded): known} if known else {}}


def test_an_integer_ids_duplicate_is_found_in_its_canonical_text(client: TestClient) -> None:
    dataset_id = _register(client, "integer")
    ids = [str(i) for i in range(1, 801)]
    ids[500] = "+0007"  # the id of row 7
    body = problem(_put(client, dataset_id, _csv(ids)), 422)
    assert [(e["row"], e["message"]) for e in body["errors"]] == [
        (7, "duplicate id"), (501, "duplicate id")]


@pytest.mark.parametrize("value", [" 7", "7.0", "7e2", "x7", "+-7", "0x1F", "١٢"])
def test_a_value_that_is_not_a_whole_number_is_a_row_error(client: TestClient,
                                                           value: str) -> None:
    dataset_id = _register(client, "integer")
    ids = [str(i) for i in range(1, 801)]
    ids[41] = value
    body = problem(_put(client, dataset_id, _csv(ids)), 422)
    assert body["total"] == 1
    (error,) = body["errors"]
    assert (error["row"], error["column"], error["message"]) == (
        42, "patient_id", "not a whole number")
    assert error["allowed"] == id_rules.INTEGER_RULE
    assert client.get(f"/v1/datasets/{dataset_id}").json()["state"] == "awaiting_data"


def test_a_float_parquet_column_cannot_hold_integer_ids(client: TestClient) -> None:
    dataset_id = _register(client, "integer")
    answer = _put(client, dataset_id, _parquet([float(i) for i in range(1, 801)]), PARQUET)
    body = problem(answer, 422)
    assert body["errors"][0]["column"] == "patient_id"
    assert "integer id column of type double" in body["errors"][0]["message"]


CANONICAL = [("007", "7"), ("+7", "7"), ("-0", "0"), ("-007", "-7"), ("0", "0"),
             ("000", "0"), ("12", "12"), ("-12", "-12"), ("9" * 40, "9" * 40)]


@pytest.mark.parametrize("layout", ["string", "large_string", "dictionary", "binary"])
def test_integer_ids_take_their_canonical_text(layout: str) -> None:
    sent = pa.array([raw for raw, _ in CANONICAL])
    arr = {"string": sent, "large_string": sent.cast(pa.large_string()),
           "dictionary": sent.dictionary_encode(), "binary": sent.cast(pa.binary())}[layout]
    log = ErrorLog()
    ids = id_rules.check_ids(arr, "patient_id", BatchRows(0, []), log, "integer")
    log.flush()
    assert not log.items and ids.to_pylist() == [canonical for _, canonical in CANONICAL]


def test_parquet_integers_are_their_decimal_text_and_text_ids_stay_as_sent() -> None:
    log = ErrorLog()
    numbers = pa.array([7, -0, -12, None], pa.int32())
    assert id_rules.check_ids(numbers, "pid", BatchRows(0, []), log,
                              "integer").to_pylist() == ["7", "0", "-12", None]
    assert id_rules.check_ids(pa.array(["007", "7"]), "pid", BatchRows(0, []),
                              log).to_pylist() == ["007", "7"]
    log.flush()
    assert [(e["row"], e["message"]) for e in log.items] == [(4, "missing id")]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(values=st.lists(st.one_of(st.none(), st.text(st.sampled_from(list("+-0123 .x7")),
                                                    max_size=5)), max_size=20),
       start=st.integers(0, 3))
def test_canonical_integers_match_pythons_reading(values: list[str | None], start: int) -> None:
    """The byte-level fast path and the Arrow path both give ``str(int(v))`` exactly for the
    whole numbers, and only for them (sliced arrays and nulls included)."""
    text = pa.array(values, pa.string()).slice(min(start, len(values)))
    canonical, whole = id_rules.canonical_integers(text)
    for value, found, ok in zip(text.to_pylist(), canonical.to_pylist(), whole.tolist(),
                                strict=True):
        expected = value is not None and re.fullmatch(r"[+-]?[0-9]+", value) is not None
        assert ok == expected
        if expected:
            assert found == str(int(value))


def test_integer_ids_need_an_id_column_and_text_keeps_every_hash() -> None:
    without = {k: v for k, v in CONTRACT.items() if k != "id_column"}
    with pytest.raises(InvalidRequest) as refused:
        check_schema(DatasetSchema.model_validate({**without, "id_kind": "integer"}))
    assert refused.value.field == "schema.id_kind" and "id_column" in refused.value.detail
    check_schema(DatasetSchema.model_validate({**without, "id_kind": "text"}))
    declared = DatasetSchema.model_validate(CONTRACT)
    assert schema_hash(declared) == schema_hash(
        DatasetSchema.model_validate({**CONTRACT, "id_kind": "text"}))  # stored hashes hold
    assert schema_hash(declared) != schema_hash(
        DatasetSchema.model_validate({**CONTRACT, "id_kind": "integer"}))


def _organisation() -> spaces.PatientSpace:
    """The organisation's space, detached, its (deferred) id scheme loaded."""
    with get_database().session_scope() as session:
        space = spaces.organisation(session=session)
        assert space.id_scheme is not None
        return space


def test_a_space_keys_by_the_scheme_it_recorded(client: TestClient,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The organisation's space records aes-v2 (its migration's); once the code's current
    scheme changes, a later table is still keyed the recorded way and finds its patients,
    which under the new scheme the index would not know."""
    assert client.get("/v1/patient-budget").json()["id_scheme"] == record_coins.AES_V2
    first = _register(client)
    assert _put(client, first, _csv([f"p-{i}" for i in range(800)])).status_code == 200
    monkeypatch.setattr(record_coins, "CURRENT_SCHEME", record_coins.BLAKE2B_V1)
    second = _register(client, name="later")
    answer = _put(client, second, _csv([f"p-{i}" for i in range(400, 1200)], seed=3))
    assert answer.status_code == 200, answer.text
    assert answer.json()["patients"]["already_known"] == 400
    space = _organisation()
    assert space.id_scheme == record_coins.AES_V2
    ids = pa.array([f"p-{i}" for i in range(400)])
    assert space.secret is not None
    newer = np.sort(record_coins.keyed_words(ids, space.secret, scheme=record_coins.BLAKE2B_V1))
    index = index_files.load(space)
    assert not index.blocks_of(newer)[0].any()  # the current scheme would split them
    assert index.blocks_of(np.sort(patient_index.digests(ids, space)))[0].all()


def test_a_new_space_records_the_current_scheme(client: TestClient,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(record_coins, "CURRENT_SCHEME", record_coins.BLAKE2B_V1)
    created = client.post("/v1/datasets", json={
        "name": "seeded", "source": {"kind": "synthetic", "n_rows": 2000, "seed": 77},
        "privacy_budget": {"epsilon": 3, "delta": 1e-5}})
    assert created.status_code == 201, created.text
    with get_database().session_scope() as session:
        dataset = session.get(Dataset, created.json()["id"])
        assert dataset is not None and dataset.patient_space_id is not None
        space = session.get(spaces.PatientSpace, dataset.patient_space_id)
        assert space is not None and space.kind == spaces.SpaceKind.GENERATOR
        assert space.id_scheme == record_coins.BLAKE2B_V1
    with get_database().session_scope() as session, pytest.raises(ValueError, match="together"):
        spaces.new_space(session=session, kind=spaces.SpaceKind.ORGANISATION, epsilon=1.0,
                         delta=1e-6, secret="00" * 32)  # a key without its scheme


COLLIDING = ("p-2000", "p-2001")


@pytest.fixture
def colliding(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The organisation's key gives ``COLLIDING`` one word, wherever ids are keyed with it
    (the upload, the index, the rows a release reads); other keys are untouched."""
    keyed, organisation = record_coins.keyed_words, _organisation().secret

    def forced(record_ids: Any, secret: str, *, scheme: str) -> np.ndarray:
        words = keyed(record_ids, secret, scheme=scheme)
        if secret == organisation:
            laid = record_ids.ids if isinstance(record_ids, record_coins.IdBlocks) else \
                record_coins.id_strings(record_ids)
            words[np.isin(np.asarray(laid.to_pylist(), dtype=object), COLLIDING)] = 12345
        return words

    monkeypatch.setattr(record_coins, "keyed_words", forced)
    yield


def test_ids_whose_digests_collide_are_one_patient_charged_together(
        client: TestClient, colliding: None) -> None:
    """Two distinct ids of one upload with one digest: the upload is accepted, its steward
    counts one patient for both rows, and a release that leaves that patient's block out
    leaves out both rows (a release that reads it reads both)."""
    first = _register(client)
    assert _put(client, first, _csv([f"p-{i}" for i in range(800)])).status_code == 200
    second = _register(client, name="with-collision")
    ids = [*(f"p-{i}" for i in range(400, 1200)), *COLLIDING]
    answer = _put(client, second, _csv(ids, seed=4))
    assert answer.status_code == 200, answer.text
    assert answer.json()["rows"] == 802
    assert answer.json()["patients"] == {"patients": 801, "already_known": 400, "new": 401,
                                         "shared_with": {str(first): 400}}
    with get_database().session_scope() as session:
        blocks = {tuple(b.datasets): b.size for b in spaces.live_blocks(
            session=session, space_id=spaces.organisation(session=session).id)}
        assert blocks == {(first,): 400, (first, second): 400, (second,): 401}
        dataset = session.get(Dataset, second)
        assert dataset is not None
        table_ids = load_table(dataset).ids
        new_only = LeftOut(frozenset({first, second}), frozenset({(second,)}))
        shared = LeftOut(frozenset({first, second}), frozenset({(first, second)}))
        leaving_new = left_out_rows.read_rows(dataset, table_ids, new_only)
        leaving_shared = left_out_rows.read_rows(dataset, table_ids, shared)
    assert table_ids.to_pylist()[-2:] == list(COLLIDING)
    assert leaving_new.tolist()[-2:] == [False, False] and int(leaving_new.sum()) == 400
    assert leaving_shared.tolist()[-2:] == [True, True] and int(leaving_shared.sum()) == 402
