"""GET /metrics: Prometheus text format, database-backed gauges and per-route HTTP series."""

from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FAST_TRAINING, PATIENT

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(client: TestClient) -> Samples:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _submit(client: TestClient, dataset_id: int, **privacy: float) -> dict[str, Any]:
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "privacy": privacy, "training": FAST_TRAINING},
    )
    assert response.status_code == 202, response.text
    return response.json()


def test_metrics_is_not_in_the_openapi_schema(client: TestClient) -> None:
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_empty_service_exposes_every_job_status_as_zero(client: TestClient) -> None:
    samples = _scrape(client)
    assert _value(samples, "dpcrisis_metrics_database_up") == 1
    for status in ("queued", "running", "succeeded", "failed", "cancelled"):
        assert _value(samples, "dpcrisis_jobs", status=status) == 0


def test_jobs_by_status_and_dataset_spend(
    client: TestClient, dataset: dict[str, Any], run_worker: Any
) -> None:
    # The job histograms are this process's (the worker's), shared by every test: deltas.
    before = _scrape(client)
    first = _submit(client, dataset["id"], noise_multiplier=1.0)
    assert run_worker() == 1
    _submit(client, dataset["id"], noise_multiplier=5.0)
    cancelled = _submit(client, dataset["id"], noise_multiplier=5.0)
    assert client.post(f"/v1/jobs/{cancelled['id']}/cancel").status_code == 200

    samples = _scrape(client)
    assert _value(samples, "dpcrisis_jobs", status="succeeded") == 1
    assert _value(samples, "dpcrisis_jobs", status="queued") == 1
    assert _value(samples, "dpcrisis_jobs", status="cancelled") == 1
    assert _value(samples, "dpcrisis_jobs", status="running") == 0

    report = client.get(f"/v1/datasets/{dataset['id']}/privacy-report").json()
    label = str(dataset["id"])
    spent = _value(samples, "dpcrisis_dataset_epsilon_spent", dataset_id=label)
    remaining = _value(samples, "dpcrisis_dataset_epsilon_remaining", dataset_id=label)
    assert spent == pytest.approx(report["spent"]["epsilon"], rel=1e-9)
    assert remaining == pytest.approx(report["remaining"]["epsilon"], rel=1e-9)

    # One job claimed and one trained: the worker observed one wait and one throughput.
    job = client.get(f"/v1/jobs/{first['id']}").json()
    assert job["status"] == "succeeded"
    for name in ("dpcrisis_job_queue_wait_seconds", "dpcrisis_training_samples_per_second"):
        count = _value(samples, f"{name}_count")
        assert count == (_value(before, f"{name}_count") or 0) + 1, name
        assert _value(samples, f"{name}_bucket", le="+Inf") == count
        assert _value(samples, f"{name}_sum") >= (_value(before, f"{name}_sum") or 0)
    rate = (_value(samples, "dpcrisis_training_samples_per_second_sum")
            - (_value(before, "dpcrisis_training_samples_per_second_sum") or 0))
    assert rate > 0  # expected samples per second of the one job


def test_request_histogram_uses_route_templates(
    client: TestClient, dataset: dict[str, Any]
) -> None:
    job = _submit(client, dataset["id"], noise_multiplier=5.0)
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 200

    samples = _scrape(client)
    count = "dpcrisis_http_request_duration_seconds_count"
    assert _value(samples, count, route="/v1/jobs/{job_id}", method="GET") == 1
    assert _value(samples, count, route="/v1/jobs", method="POST") == 1
    routes = {dict(labels).get("route") for name, labels in samples if name == count}
    assert f"/v1/jobs/{job['id']}" not in routes
    templates = set(client.get("/openapi.json").json()["paths"])
    assert routes <= templates, routes - templates


def test_errors_counter_increments_on_404(client: TestClient) -> None:
    name = "dpcrisis_http_errors_total"
    job_route = {"route": "/v1/jobs/{job_id}", "status": "404"}
    before = _value(_scrape(client), name, method="GET", **job_route) or 0
    assert client.get("/v1/jobs/987654").status_code == 404
    assert client.get("/v1/jobs/987655").status_code == 404
    assert client.get("/no/such/path/123").status_code == 404

    samples = _scrape(client)
    assert _value(samples, name, method="GET", **job_route) == before + 2
    assert _value(samples, name, route="<unmatched>", method="GET", status="404") == 1
    assert not any(n == name and "method" not in dict(labels) for n, labels in samples)
    assert not any("987654" in v or "/no/such" in v for _, labels in samples for _, v in labels)


def test_scoring_latency_is_the_risk_route_series_and_carries_no_features(
    client: TestClient, dataset: dict[str, Any], run_worker: Any
) -> None:
    _submit(client, dataset["id"], target_epsilon=3.0)
    assert run_worker() == 1
    assert client.post("/v1/risk", json={"features": PATIENT}).status_code == 200

    samples = _scrape(client)
    count = "dpcrisis_http_request_duration_seconds_count"
    assert _value(samples, count, route="/v1/risk", method="POST") == 1
    labels = {item for _, sample_labels in samples for pair in sample_labels for item in pair}
    assert not labels & set(PATIENT)
    assert "phq9" not in client.get("/metrics").text
