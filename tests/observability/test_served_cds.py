"""Served-score drift metrics for CDS Hooks: a scored patient-view call counts once, like
``/v1/risk`` (its model, band and probability bucket), whether or not its band earned a card;
a refused call (401, 403, 404, 400, 412, 422) or an insufficient-data card counts nothing."""

from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.bands import BANDS
from tests.api.scoring_helpers import train_models
from tests.cdshooks.test_cds_hooks import URL, hook_call, prefetch
from tests.conftest import PATIENT
from tests.observability.test_served_scores import (
    LE,
    _expected_buckets,
    _get,
    _page,
    _samples,
)


def _served(client: TestClient, model: str) -> dict[tuple[str, str], float]:
    """This model's served series only (other models' and other series' counts may move)."""
    samples = _samples(_page(client))
    series = {("band_total", band): _get(samples, "dpcrisis_served_band_total", model_id=model,
                                         band=band) for band in BANDS}
    series |= {("bucket", le): _get(samples, "dpcrisis_served_score_bucket", model_id=model,
                                    le=le) for le in LE}
    for name in ("count", "sum"):
        series[(name, "")] = _get(samples, f"dpcrisis_served_score_{name}", model_id=model)
    return series


def _delta(after: dict[tuple[str, str], float], before: dict[tuple[str, str], float]
           ) -> dict[tuple[str, str], float]:
    return {key: after[key] - before[key] for key in after}


def _want(answers: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """The deltas these /v1/risk answers would make, the slow, obvious way."""
    probabilities = [a["probability"] for a in answers]
    want: dict[tuple[str, str], float] = {
        ("band_total", band): sum(a["band"] == band for a in answers) for band in BANDS}
    want |= dict(zip((("bucket", le) for le in LE), _expected_buckets(probabilities),
                     strict=True))
    want[("count", "")] = len(answers)
    want[("sum", "")] = sum(probabilities)
    return want


def _refuse(client: TestClient, client_as: Callable[[str | None], TestClient]) -> None:
    """Every way a hook call is refused, and the one a 200 scores nobody."""
    left_out = prefetch()
    left_out.pop("phq9")
    out_of_range = prefetch()
    out_of_range["phq9"]["entry"][0]["resource"]["valueQuantity"]["value"] = 30
    refused = {
        401: client_as(None).post(URL, json=hook_call()),
        403: client_as("data_scientist").post(URL, json=hook_call()),
        404: client.post("/cds-services/nope", json=hook_call()),
        400: client.post(URL, json=hook_call(hook="order-select")),
        412: client.post(URL, json=hook_call(prefetch=left_out)),
        422: client.post(URL, json=hook_call(prefetch=out_of_range)),
    }
    for status, response in refused.items():
        assert response.status_code == status, (status, response.text)
    no_data = prefetch()
    no_data["phq9"] = None  # no data is an insufficient-data card, never a score
    insufficient = client.post(URL, json=hook_call(prefetch=no_data))
    assert insufficient.status_code == 200, insufficient.text
    (card,) = insufficient.json()["cards"]
    assert card["summary"].endswith("not scored: insufficient data"), card


def test_a_cds_hooks_answer_counts_once_and_a_refused_call_not_at_all(
    client: TestClient, run_worker: Any, client_as: Callable[[str | None], TestClient]
) -> None:
    (model_id,) = train_models(client, run_worker)
    model = str(model_id)
    plain = client.post("/v1/risk", json={"features": PATIENT})  # the same patient, as JSON
    assert plain.status_code == 200, plain.text
    # The counts are this process's, shared by every test that scores: deltas.
    before = _served(client, model)

    _refuse(client, client_as)
    assert _delta(_served(client, model), before) == dict.fromkeys(before, 0.0)

    shown = client.post(URL, json=hook_call())
    assert shown.status_code == 200, shown.text
    assert len(shown.json()["cards"]) == 1
    moved = _delta(_served(client, model), before)
    want = _want([plain.json()])
    assert moved.pop(("sum", "")) == pytest.approx(want.pop(("sum", "")), rel=1e-9)
    assert moved == want
    assert sum(moved[("band_total", band)] for band in BANDS) == 1


def test_a_patient_below_the_minimum_band_gets_no_card_and_still_counts(
    client: TestClient, run_worker: Any
) -> None:
    """The band mix must not follow each EHR's display choice: a hidden answer was served."""
    (model_id,) = train_models(client, run_worker)
    model = str(model_id)
    calm = {**PATIENT, "phq9": 0, "gaf": 95, "substance_use": 0, "prior_crisis": 0}
    plain = client.post("/v1/risk", json={"features": calm})
    assert plain.status_code == 200, plain.text
    assert plain.json()["band"] != "high", plain.json()  # a call asking for high shows none
    data = prefetch()
    data["phq9"]["entry"][0]["resource"]["valueQuantity"]["value"] = 0
    data["gaf"]["entry"][0]["resource"]["valueInteger"] = 95
    data["substance_use"]["entry"][0]["resource"]["valueBoolean"] = False
    data["prior_crisis"]["valueCodeableConcept"]["coding"][0]["code"] = "373067005"  # No
    before = _served(client, model)

    hidden = client.post(URL, json=hook_call(prefetch=data,
                                             extension={"dev.dpcrisis.min-band": "high"}))
    assert hidden.status_code == 200, hidden.text
    assert hidden.json()["cards"] == []
    moved = _delta(_served(client, model), before)
    want = _want([plain.json()])
    assert moved.pop(("sum", "")) == pytest.approx(want.pop(("sum", "")), rel=1e-9)
    assert moved == want

