"""The registration's equality oracle, re-run as a data scientist: it learns nothing.

The attack: knowing every row of a registered private table but one patient's outcome, upload
both guesses as new datasets; the guess that collides with the registered table got a 409
naming it, the other a 200, so one value was read out exactly, with no noise and no charge.
Whether a source is registered depends on another dataset's rows, so only the roles that hold
the tables (data steward, admin) may register or upload; everyone else is refused before any
source is compared, with the same answer whatever the guess.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from app.core.settings import settings
from app.datasets import synthetic
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA, SEX_CATEGORIES
from app.datasets.schemas import same_rows_warning
from tests.datasets.test_upload_api import _csv, _put, _register, _rows

VICTIM = 17  # the one patient whose outcome the attacker does not know


@pytest.fixture(autouse=True)
def _data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return tmp_path / "data"


def _guesses(rows: list[str]) -> dict[int, bytes]:
    """The attacker's two tables: every row as registered, the victim's outcome 0 or 1."""
    tables = {}
    for outcome in (0, 1):
        guess = list(rows)
        guess[VICTIM] = f"{guess[VICTIM].rsplit(',', 1)[0]},{outcome}"
        tables[outcome] = _csv(guess)
    return tables


def _refusal(response: Response) -> tuple[int, dict[str, Any]]:
    """What the caller learns: the status and the body (less ``instance``, the request's URL)."""
    body = response.json()
    return response.status_code, {k: v for k, v in body.items() if k != "instance"}


def test_a_data_scientist_cannot_ask_whether_a_table_is_registered(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    rows = _rows(1000, seed=5)
    truth = int(rows[VICTIM].rsplit(",", 1)[1])
    registered = _register(client, name="private")
    assert _put(client, registered["id"], _csv(rows)).status_code == 200
    scientist, guesses = client_as("data_scientist"), _guesses(rows)

    # Sending each guess to an empty registration: the same refusal for both (once,
    # the true guess got a 409 naming the registered dataset, the other a 200).
    empty = {g: _register(client, name=f"empty-{g}")["id"] for g in guesses}
    answers = {g: _refusal(_put(scientist, empty[g], table)) for g, table in guesses.items()}
    assert answers[0] == answers[1] and answers[0][0] == 403, answers
    assert not any(k.startswith("existing") for _, refusal in answers.values() for k in refusal)
    # Registering each guess as a new upload: refused before any table is compared.
    body = {"name": "guess", "source": {"kind": "upload"}, "schema": registered["schema"],
            "privacy_budget": {"epsilon": 3, "delta": 1e-5}}
    answers = {g: _refusal(scientist.post("/v1/datasets", json=body)) for g in guesses}
    assert answers[0] == answers[1] and answers[0][0] == 403, answers
    listed = scientist.get("/v1/datasets").json()
    assert listed["total"] == 3 and {d["state"] for d in listed["items"][1:]} == {
        "awaiting_data"}

    # The holders of the tables still get the duplicate answer: a private re-upload shares
    # its patients' spend (no second budget), and the steward is warned.
    steward = client_as("data_steward")
    shared = _put(steward, empty[truth], guesses[truth])
    assert shared.status_code == 200, shared.text
    assert shared.json()["warnings"] == [same_rows_warning(registered["id"])]


def test_a_data_scientist_cannot_probe_a_synthetic_source_or_read_its_seed(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    source = {"kind": "synthetic", "n_rows": 1000, "seed": 4242}
    budget = {"epsilon": 3, "delta": 1e-5}
    created = client.post("/v1/datasets", json={"name": "private-synthetic", "source": source,
                                                "privacy_budget": budget})
    assert created.status_code == 201, created.text
    scientist = client_as("data_scientist")
    probes = {seed: _refusal(scientist.post("/v1/datasets", json={
        "name": "probe", "source": {**source, "seed": seed}, "privacy_budget": budget}))
        for seed in (4242, 4243)}  # the registered seed, and one that is not
    assert probes[4242] == probes[4243] and probes[4242][0] == 403, probes
    shown = scientist.get(f"/v1/datasets/{created.json()['id']}").json()
    assert shown["source"]["seed"] is None
    assert client.get("/v1/datasets").json()["total"] == 1


def test_a_generators_rows_reuploaded_are_the_registered_source(
    client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A private synthetic dataset's rows, written out and uploaded (public or private) under
    the generator's schema, are the same source: refused, not given a budget of their own."""
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    private = client.post("/v1/datasets", json={
        "name": "generated", "source": {"kind": "synthetic", "n_rows": 400, "seed": 4242},
        "privacy_budget": {"epsilon": 1, "delta": 1e-5}})
    assert private.status_code == 201, private.text
    table = synthetic.generate(400, 4242)
    schema = {**BUILT_IN_SCHEMA.model_dump(mode="json", by_alias=True), "id_column": "pid"}
    names = [f["name"] for f in schema["features"]]
    lines = [",".join(["pid", *names, "sex", "crisis_30d"])]
    for i in reversed(range(400)):  # another order, other ids: the same rows
        values = [str(int(v)) if float(v).is_integer() else repr(float(v)) for v in table.x[i]]
        lines.append(",".join([f"r{i}", *values, SEX_CATEGORIES[table.sex[i]],
                               str(int(table.y[i]))]))
    for made in ({"public": True}, {"privacy_budget": {"epsilon": 1, "delta": 1e-6}}):
        # Public, or private into the organisation's patient space: the generator's patients
        # are its seed's space's, so either would be a second budget for them.
        upload = client.post("/v1/datasets", json={
            "name": "re-upload", "source": {"kind": "upload"}, "schema": schema, **made})
        assert upload.status_code == 201, upload.text
        answer = client.put(f"/v1/datasets/{upload.json()['id']}/data",
                            content=("\n".join(lines) + "\n").encode(),
                            headers={"Content-Type": "text/csv"})
        assert answer.status_code == 409, answer.text
        assert answer.json()["existing_dataset_id"] == private.json()["id"]
