"""CDS Hooks scores a patient whose prefetch has no data for a feature declared ``"missing":
"reference"`` (a null key, an empty searchset, a key left out, or no code at all) at its
reference value, and the risk card names the imputed inputs; a required feature without data
still gets the "insufficient data" card."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.settings import settings
from tests.cdshooks.test_cds_hooks import URL, bundle, hook_call
from tests.cdshooks.test_cds_schema import clinic_prefetch
from tests.fhir.clinic_model import train_clinic_model


@pytest.fixture
def imputing(client: TestClient, run_worker: Any, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> int:
    """PHQ-9 (coded) and sleep (no code: never in a prefetch) imputable."""
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    return train_clinic_model(client, run_worker, imputed=True)


def _card(client: TestClient, prefetch: dict[str, Any]) -> dict[str, Any]:
    response = client.post(URL, json=hook_call(prefetch=prefetch))
    assert response.status_code == 200, response.text
    (card,) = response.json()["cards"]
    return card


def test_a_missing_imputable_value_is_scored_and_named(client: TestClient,
                                                       imputing: int) -> None:
    (service,) = client.get("/cds-services").json()["services"]
    assert "phq9, sleep_hours be missing" in service["description"]
    assert service["extension"]["dev.dpcrisis.not-prefetchable"] == ["sleep_hours"]

    prefetch = clinic_prefetch()
    scored = _card(client, prefetch)  # sleep has no code: always imputed
    assert "insufficient data" not in scored["summary"]
    assert "- Sleep not given: scored at the reference value 7.5 hours a night" in scored[
        "detail"]
    assert "PHQ-9 (`phq9`)" not in scored["detail"] and "Sleep (`sleep_hours`)." in scored[
        "detail"]
    for phq9 in (None, bundle()):
        card = _card(client, {**prefetch, "phq9": phq9})
        assert "insufficient data" not in card["summary"]
        assert "PHQ-9 (`phq9`), Sleep (`sleep_hours`)." in card["detail"], card["detail"]
    left_out = {k: v for k, v in prefetch.items() if k != "phq9"}
    assert "PHQ-9 (`phq9`), Sleep" in _card(client, left_out)["detail"]  # not a 412

    lacking = _card(client, {**prefetch, "living": None})
    assert "insufficient data" in lacking["summary"]
    assert "Living situation (`living`" in lacking["detail"] and "phq9" not in lacking["detail"]
