"""One shared patient changes nothing a data scientist reads about another table.

Tables D and E hold 3,000 patients each and share none (world 0) or exactly one (world 1).
After a release on D, a data scientist reads E (the dataset, its privacy report in JSON and
HTML) and submits a release on E that the shared patient's budget cannot afford: every answer,
once the ids, names and timestamps that differ between any two worlds are set aside, is the
same. The shared patient is left out of E's release instead (the rows it reads show it).
"""

import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.database import Database
from app.datasets import parts
from app.datasets import service as dataset_service
from app.datasets.patients import identity
from app.ledger import left_out
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from tests.conftest import _client, _postgres_database, _sqlite_database, bearer, new_key
from tests.ledger.test_patient_budget import _job, _upload

ISO = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)?")
HEX = re.compile(r"\b[0-9a-f]{64}\b")


def _scrubbed(value: Any, key: str = "") -> Any:
    """The answer without what differs between any two runs: times and hashes (ids and names
    are the same in both worlds, each in a database of its own)."""
    if isinstance(value, dict):
        return {k: _scrubbed(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, key) for v in value]
    if key.endswith("_at"):
        return "<time>"
    if isinstance(value, str):
        return HEX.sub("<hash>", ISO.sub("<time>", value))
    return value


def _answers(client: TestClient, client_as: Callable[[str | None], TestClient],
             shared: int) -> tuple[dict[str, Any], int]:
    """Register D and E (sharing ``shared`` patients), release on D, and read E as a data
    scientist: the answers, and the id of the job submitted on E."""
    e_ids = [f"e-{i}" for i in range(3000)]  # E is the same table in both worlds
    d_ids = [f"d-{i}" for i in range(3000 - shared)] + e_ids[:shared]
    d = _upload(client, d_ids, "D")
    e = _upload(client, e_ids, "E", seed=3)
    assert _job(client, d, 6).status_code == 202
    scientist = client_as("data_scientist")
    seen: dict[str, Any] = {}
    for path in (f"/v1/datasets/{e}", f"/v1/datasets/{e}/privacy-report"):
        answer = scientist.get(path)
        seen[path] = (answer.status_code, _scrubbed(answer.json()))
    page = scientist.get(f"/v1/datasets/{e}/privacy-report", headers={"Accept": "text/html"})
    seen["report page"] = (page.status_code, _scrubbed(page.text))
    job = _job(scientist, e, 7.9)
    seen["job on E"] = (job.status_code, _scrubbed(job.json()))
    return seen, int(job.json()["id"])


def _world(kind: str, folder: Path, shared: int, monkeypatch: pytest.MonkeyPatch
           ) -> tuple[dict[str, Any], int, Iterator[Database], Database]:
    """One world in a database of its own, its datasets keyed by the same secrets as the
    other world's (so each record falls in the same part in both)."""
    keys = (f"{k:064x}" for k in itertools.count(1))
    monkeypatch.setattr(identity, "new_secret", lambda: next(keys))
    folder.mkdir()
    made = _sqlite_database(folder) if kind == "sqlite" else _postgres_database()
    database = next(made)
    serving = _client(database)
    client = next(serving)

    def as_role(role: str | None) -> TestClient:
        return TestClient(client.app, headers={} if role is None else bearer(new_key(role)))

    try:
        seen, job_id = _answers(client, as_role, shared)
    finally:
        serving.close()
    return seen, job_id, made, database


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_one_shared_patient_changes_no_answer_a_data_scientist_reads(
        kind: str, tmp_path: Path, artifact_dir: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    if kind == "postgres" and not request.getfixturevalue("postgres_ready"):
        pytest.skip("PostgreSQL not reachable")
    alone, _, made, _ = _world(kind, tmp_path / "alone", 0, monkeypatch)
    made.close()  # drops its database
    together, job_id, made, database = _world(kind, tmp_path / "together", 1, monkeypatch)
    try:
        for what in alone:
            assert alone[what] == together[what], what
        assert alone["job on E"][0] == 202
        _check_left_out(database, job_id)
    finally:
        made.close()


def _check_left_out(database: Database, job_id: int) -> None:
    """The shared patient was left out of E's release: it reads 2,999 of E's rows, and every
    part's public size is still the dataset's."""
    with database.session_scope() as session:
        entry = ledger_service.entry_of(session=session, scope=Scope.job(job_id))
        assert entry is not None
        left = left_out.of(entry)
        assert left is not None
        dataset = dataset_service.get(session=session, dataset_id=entry.dataset_id)
        split = parts.load_parts(dataset, left)
        everyone = parts.load_parts(dataset)
    read = [split.train, split.calibration, split.evaluation]
    full = [everyone.train, everyone.calibration, everyone.evaluation]
    assert sum(len(p.y) for p in read) == 2999 and sum(p.rows for p in read) == 3000
    assert [p.rows for p in read] == [len(p.y) for p in full]


def test_a_unions_size_does_not_give_away_its_members_overlap(
        client: TestClient, client_as: Callable[[str | None], TestClient]) -> None:
    """Two cohorts sharing exactly one patient: the union's size a data scientist reads is the
    members' summed, whatever they share (the exact count is the stewards')."""
    first = _upload(client, [f"t-{i}" for i in range(3000)], "train")
    second = _upload(client, [f"t-{i}" for i in range(2999, 6000)], "follow", seed=2)
    made = client_as("data_steward").post("/v1/datasets", json={
        "name": "u", "source": {"kind": "union", "datasets": [first, second]},
        "privacy_budget": {"epsilon": 8, "delta": 1e-6}})
    assert made.status_code == 201, made.text
    union_id = made.json()["id"]
    assert made.json()["patients"]["patients"] == 6000  # the steward's exact count
    scientist = client_as("data_scientist")
    read = {k: scientist.get(f"/v1/datasets/{k}").json() for k in (first, second, union_id)}
    assert read[union_id]["patients"] is None
    for size in ("rows", "training_rows", "calibration_rows", "holdout_rows"):
        assert read[union_id][size] == read[first][size] + read[second][size], size
