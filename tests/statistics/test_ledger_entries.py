"""A statistics release's ledger entry: hash-chained with its components (editing them breaks
the chain at its reserve record), refused by the integrity checks when its recorded noise
contradicts its components, and owned by exactly one of a job and a release (SQLite and
PostgreSQL)."""

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError

from app.core.database import Database
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry, LedgerEvent
from tests.conftest import small_dataset
from tests.statistics.helpers import EXAMPLE, ask


def _released(client: TestClient) -> tuple[int, int]:
    dataset_id = client.post("/v1/datasets", json=small_dataset()).json()["id"]
    release = ask(client, dataset_id, EXAMPLE)
    assert release.status_code == 201, release.text
    return dataset_id, release.json()["id"]


def _verify(client: TestClient, dataset_id: int) -> dict[str, object]:
    return client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()


def test_a_release_is_reserved_and_committed_in_the_chain(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id, release_id = _released(any_client)
    verified = _verify(any_client, dataset_id)
    assert verified["valid"] is True and verified["records"] == 3
    with any_db.session_scope() as session:
        kinds = session.scalars(select(LedgerEvent.kind).where(
            LedgerEvent.dataset_id == dataset_id).order_by(LedgerEvent.seq)).all()
        entry = session.scalar(select(LedgerEntry).where(
            LedgerEntry.statistics_release_id == release_id))
        assert entry is not None and entry.status == "committed" and entry.charged_steps == 1
    assert list(kinds) == ["budget", "reserve", "commit"]


def test_editing_a_releases_components_breaks_the_chain_at_its_reserve(
    any_client: TestClient, any_db: Database
) -> None:
    dataset_id, release_id = _released(any_client)
    with any_db.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_entry SET components = :c WHERE "
                          "statistics_release_id = :r"), {"c": "[100.0]", "r": release_id})
    result = _verify(any_client, dataset_id)
    assert result["valid"] is False
    assert result["first_invalid"]["seq"] == 2 and "hash" in result["first_invalid"]["reason"]


def test_an_entry_with_two_owners_or_none_is_refused_by_the_database(
    any_client: TestClient, any_db: Database
) -> None:
    _, release_id = _released(any_client)
    with pytest.raises(IntegrityError), any_db.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_entry SET statistics_release_id = NULL WHERE "
                          "statistics_release_id = :r"), {"r": release_id})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"noise_multiplier": 1.0}, "contradict its gaussian components"),
        ({"components": []}, "needs positive components"),
        ({"components": [1.0, -2.0]}, "needs positive components"),
        ({"steps": 2}, "contradict"),
        ({"mechanism": "poisson_subsampled_gaussian"}, "unknown mechanism"),
    ],
)
def test_a_release_entry_that_contradicts_its_components_is_refused(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {
        "id": 1, "dataset_id": 1, "statistics_release_id": 1, "mechanism": "gaussian",
        "noise_multiplier": 1 / (1 / 4.0 + 1 / 9.0) ** 0.5, "sample_rate": 1.0, "steps": 1,
        "clip_norm": 1.0, "delta": 1e-5, "accountant": "rdp", "components": [2.0, 3.0],
    }
    assert ledger_spend.entry_rdp_at(LedgerEntry(**fields), 2.0) == pytest.approx(
        2.0 * (1 / 4.0 + 1 / 9.0) / 2)
    fields.update(changes)
    with pytest.raises(ledger_spend.LedgerIntegrityError, match=message):
        ledger_spend.entry_rdp_at(LedgerEntry(**fields), 2.0)
