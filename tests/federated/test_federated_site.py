"""A clinic's part without a coordinator: the real worker claims the federated job and runs its
rounds (real DP-SGD steps, real ledger commits) through a stand-in for Flower's connection."""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.core.settings import settings
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import schema_hash
from app.federation import signing
from app.federation.signing import new_key
from tests.conftest import small_dataset
from worker import federated_site
from worker.federated_site import SiteRun

pytestmark = pytest.mark.slow
ROUNDS, LOCAL_STEPS = 5, 4


def _join(client: TestClient, client_as: Callable[[str], TestClient],
          keys: tuple[str, str] | None = None) -> tuple[int, int]:
    sites: list[dict[str, Any]] = [{"name": "clinic-a"}, {"name": "clinic-b"}]
    if keys is not None:
        sites = [{**site, "public_key": key} for site, key in zip(sites, keys, strict=True)]
    made = client.post("/v1/federations", json={
        "name": "net", "role": "site", "address": "127.0.0.1:9", "site_name": "clinic-a",
        "schema_sha256": schema_hash(BUILT_IN_SCHEMA), "sites": sites,
        "recipe": {"rounds": ROUNDS, "local_steps": LOCAL_STEPS, "target_epsilon": 3}})
    assert made.status_code == 201, made.text
    dataset_id = client.post("/v1/datasets", json=small_dataset()).json()["id"]
    joined = client_as("data_steward").post(f"/v1/federations/{made.json()['id']}/join",
                                            json={"dataset_id": dataset_id})
    assert joined.status_code == 202, joined.text
    return dataset_id, int(joined.json()["id"])


def _ended(client: TestClient, dataset_id: int, job_id: int
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The part's job as it ended, and its ledger entry."""
    return client.get(f"/v1/jobs/{job_id}").json(), _entry(client, dataset_id, job_id)


def _entry(client: TestClient, dataset_id: int, job_id: int) -> dict[str, Any]:
    report = client.get(f"/v1/datasets/{dataset_id}/privacy-report").json()
    (entry,) = [e for e in report["entries"] if e["job_id"] == job_id]
    return dict(entry)


def test_a_cancelled_part_stops_before_its_next_round_and_keeps_the_rounds_it_ran(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dataset_id, job_id = _join(client, client_as)

    def two_rounds_then_cancelled(address: str, run: SiteRun) -> None:
        for _ in range(2):
            run.run_round(run.weights())
        assert client_as("data_scientist").post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        run.run_round(run.weights())  # refused at its commit: no row read

    monkeypatch.setattr(federated_site, "connect", two_rounds_then_cancelled)
    assert run_worker(limit=1) == 1
    job, entry = _ended(client, dataset_id, job_id)
    assert job["status"] == "cancelled", job
    # The cancel is read before the third round's commit: two rounds charged, the rest back.
    assert entry["charged_steps"] == 2 * LOCAL_STEPS and entry["remainder_released"], entry


def test_a_federation_that_ends_early_keeps_the_rounds_run_and_releases_the_rest(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dataset_id, job_id = _join(client, client_as)

    def two_rounds(address: str, run: SiteRun) -> None:
        for _ in range(2):
            run.run_round(run.weights())

    monkeypatch.setattr(federated_site, "connect", two_rounds)
    run_worker(limit=1)
    job, entry = _ended(client, dataset_id, job_id)
    assert (job["status"], job["error"]["code"]) == ("failed", "federation_ended"), job
    assert entry["charged_steps"] == 2 * LOCAL_STEPS and entry["remainder_released"], entry


def test_a_worker_without_flower_fails_the_part_and_charges_nothing(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    dataset_id, job_id = _join(client, client_as)
    monkeypatch.setitem(sys.modules, "flwr", None)  # an install without the federated extra
    run_worker(limit=1)
    job, entry = _ended(client, dataset_id, job_id)
    assert (job["status"], job["error"]["code"]) == ("failed", "federated_extra_missing"), job
    assert entry["charged_steps"] == 0 and entry["status"] == "released", entry


@pytest.mark.parametrize("setting", ["unset", "another-key", "not-a-key"])
def test_a_keyed_federation_without_this_sites_key_fails_the_part_and_charges_nothing(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str) -> None:
    (_, mine), (other_pem, other) = new_key(), new_key()
    dataset_id, job_id = _join(client, client_as, keys=(mine, other))
    path = tmp_path / "site.pem"
    path.write_bytes(other_pem if setting == "another-key" else b"not a key")
    monkeypatch.setattr(settings, "federation_site_key", None if setting == "unset" else path)
    monkeypatch.setattr(federated_site, "connect", lambda *_: pytest.fail("no round may run"))
    run_worker(limit=1)
    job, entry = _ended(client, dataset_id, job_id)
    assert (job["status"], job["error"]["code"]) == ("failed", "federation_key_unusable"), job
    assert "FEDERATION_SITE_KEY" in job["error"]["message"]
    assert entry["charged_steps"] == 0 and entry["status"] == "released", entry


def test_a_keyed_site_signs_its_rounds_with_its_own_key(
        client: TestClient, client_as: Callable[[str], TestClient], run_worker: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (mine_pem, mine), (_, other) = new_key(), new_key()
    _join(client, client_as, keys=(mine, other))
    (tmp_path / "site.pem").write_bytes(mine_pem)
    monkeypatch.setattr(settings, "federation_site_key", tmp_path / "site.pem")
    seen: list[bool] = []

    def one_signed_round(address: str, run: SiteRun) -> None:
        config = {"server_round": 1, "nonce": "n1"}
        weights = run.run_round(run.weights())
        answer = run.signed({"steps": LOCAL_STEPS}, kind=signing.FIT, config=config,
                            payload_sha256=signing.arrays_sha256(weights))
        signed = signing.message(federation="net", site="clinic-a", kind=signing.FIT,
                                 server_round=1, nonce="n1", figures={"steps": LOCAL_STEPS},
                                 payload_sha256=signing.arrays_sha256(weights))
        seen.append(signing.verifies(mine, signed, answer["signature"]))
        seen.append(signing.verifies(other, signed, answer["signature"]))

    monkeypatch.setattr(federated_site, "connect", one_signed_round)
    run_worker(limit=1)
    assert seen == [True, False]


def test_the_coordinator_command_without_flower_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in [m for m in sys.modules if m == "flwr" or m.startswith("flwr.")] + ["flwr"]:
        monkeypatch.setitem(sys.modules, name, None)  # every Flower module unimportable
    monkeypatch.delitem(sys.modules, "worker.federated_coordinator", raising=False)
    assert main(["federation-coordinator", "--federation", "1"]) == 2
    assert "pip install -e '.[federated]'" in capsys.readouterr().err


def test_the_key_command_writes_an_owner_only_key_once_and_prints_its_public_half(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "site.pem"
    assert main(["federation-key", "--out", str(path)]) == 0
    public = capsys.readouterr().out.strip()
    assert path.stat().st_mode & 0o777 == 0o600
    assert signing.public_of(signing.load_private(path)) == public
    before = path.read_bytes()
    assert main(["federation-key", "--out", str(path)]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err and path.read_bytes() == before
