"""Served-score drift metrics: each patient answer counted once in its band and its score
bucket, whichever endpoint served it (single, batch full and compact, FHIR), under model ids
only; the page stays clean Prometheus text."""

import shutil
import subprocess
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.bands import BANDS, Band
from app.observability.served_scores import SCORE_BUCKETS, ServedScores
from tests.api.scoring_helpers import train_models
from tests.conftest import PATIENT
from tests.scoring.test_risk_batch import random_patients

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
LE = [*(str(b) for b in SCORE_BUCKETS), "+Inf"]


def _samples(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _collected(served: ServedScores) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(served)
    return _samples(generate_latest(registry).decode())


def _get(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _expected_buckets(probabilities: list[float]) -> list[int]:
    """Cumulative counts with ``le`` inclusive, computed the slow, obvious way."""
    bounds = [*SCORE_BUCKETS, float("inf")]
    return [sum(p <= b for p in probabilities) for b in bounds]


# --- the collector ----------------------------------------------------------------------------

def test_a_batch_counts_each_patient_once_and_bounds_are_inclusive() -> None:
    served = ServedScores()
    p = [0.0, 0.01, 0.011, 0.05, 0.2, 0.95, 1.0]
    served.record(3, np.asarray(p), ["low", "low", "low", "medium", "high", "high", "high"])
    served.record(3, [0.3], [Band.HIGH])  # Band members count as their names
    served.record(4, [0.04, 0.06], np.asarray([0, 1]))  # or band indices (band_index)
    samples = _collected(served)

    for band, count in {"low": 3, "medium": 1, "high": 4}.items():
        assert _get(samples, "dpcrisis_served_band_total", model_id="3", band=band) == count
    # Every band is present once a model has served anything, zeros included.
    assert _get(samples, "dpcrisis_served_band_total", model_id="4", band="high") == 0
    assert ("dpcrisis_served_band_total",
            frozenset({("model_id", "4"), ("band", "high")})) in samples
    for le, want in zip(LE, _expected_buckets([*p, 0.3]), strict=True):
        assert _get(samples, "dpcrisis_served_score_bucket", model_id="3", le=le) == want, le
    assert _get(samples, "dpcrisis_served_score_count", model_id="3") == 8
    assert _get(samples, "dpcrisis_served_score_sum", model_id="3") == pytest.approx(sum(p) + 0.3)
    assert {dict(labels).get("model_id") for _, labels in samples} <= {"3", "4"}


def test_an_empty_collector_exposes_no_series_and_bad_input_is_refused() -> None:
    served = ServedScores()
    assert _collected(served) == {}
    served.record(1, [], [])
    assert _get(_collected(served), "dpcrisis_served_band_total", model_id="1", band="low") == 0
    with pytest.raises(ValueError, match="bands for"):
        served.record(1, [0.1, 0.2], ["low"])
    with pytest.raises(ValueError, match="unknown band"):
        served.record(1, [0.1], ["severe"])
    with pytest.raises(ValueError, match="band indices"):
        served.record(1, [0.1], np.asarray([3]))


# --- through the API --------------------------------------------------------------------------

def _page(client: TestClient) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    return response.text


def test_every_scoring_endpoint_counts_its_answers_in_metrics(
    client: TestClient, run_worker: Any
) -> None:
    (model_id,) = train_models(client, run_worker)
    model = str(model_id)
    # The counts are this process's, shared by every test that scores: deltas.
    before = _samples(_page(client))

    single = client.post("/v1/risk", json={"features": PATIENT})
    assert single.status_code == 200, single.text
    patients = random_patients(30, seed=3)
    body = {"patients": [{"features": p} for p in patients]}
    full = client.post("/v1/risk/batch", json=body)
    compact = client.post("/v1/risk/batch", params={"view": "compact"},
                          json={"patients": body["patients"][:7]})
    fhir = client.post("/v1/risk/fhir", json={"features": PATIENT})
    assert full.status_code == compact.status_code == fhir.status_code == 200, fhir.text

    # FHIR rounds its probability; it scored PATIENT, as /v1/risk did.
    answers = [single.json(), *full.json()["results"], *compact.json()["results"],
               single.json()]
    text = _page(client)
    after = _samples(text)

    def delta(name: str, **labels: str) -> float:
        return _get(after, name, **labels) - _get(before, name, **labels)

    for band in BANDS:
        want = sum(a["band"] == band for a in answers)
        assert delta("dpcrisis_served_band_total", model_id=model, band=band) == want, band
    probabilities = [a["probability"] for a in answers]
    for le, want in zip(LE, _expected_buckets(probabilities), strict=True):
        assert delta("dpcrisis_served_score_bucket", model_id=model, le=le) == want, le
    assert delta("dpcrisis_served_score_count", model_id=model) == len(answers) == 39
    assert delta("dpcrisis_served_score_sum", model_id=model) == pytest.approx(
        sum(probabilities), rel=1e-9)

    # Labels are model ids and band names: no feature name or value reaches the page.
    served = [labels for name, labels in after if name.startswith("dpcrisis_served_")]
    assert {k for labels in served for k, _ in labels} <= {"model_id", "band", "le"}
    assert "phq9" not in text

    promtool = shutil.which("promtool")
    if promtool is not None:  # test_metrics_format checks the page without served series
        checked = subprocess.run([promtool, "check", "metrics"], input=text,
                                 capture_output=True, text=True, timeout=60, check=False)
        assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), (
            checked.stdout + checked.stderr)
