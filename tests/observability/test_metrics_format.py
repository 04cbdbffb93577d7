"""The /metrics page is clean Prometheus text: what ``promtool check metrics`` checks (and
promtool itself where it is installed), histograms for the job figures the worker feeds,
latency buckets around the 10 ms scoring goal, and the worker's own exporter."""

import shutil
import socket
import subprocess
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.observability import job_metrics
from tests.conftest import FAST_TRAINING

PROMTOOL = shutil.which("promtool")
JOB_HISTOGRAMS = ("dpcrisis_job_queue_wait_seconds", "dpcrisis_training_samples_per_second")


def _page(client: TestClient) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    return response.text


def _trained(client: TestClient, dataset: dict[str, Any], run_worker: Any) -> None:
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                        "privacy": {"noise_multiplier": 1.0},
                                        "training": FAST_TRAINING})
    assert job.status_code == 202, job.text
    assert run_worker() == 1
    assert client.get("/v1/jobs/987654").status_code == 404  # an error series too


def test_only_summaries_have_quantiles_and_no_created_series(
    client: TestClient, dataset: dict[str, Any], run_worker: Any
) -> None:
    _trained(client, dataset, run_worker)
    families = list(text_string_to_metric_families(_page(client)))
    types = {f.name: f.type for f in families}
    for family in families:
        for sample in family.samples:
            assert not sample.name.endswith("_created"), sample.name
            if family.type != "summary":
                assert "quantile" not in sample.labels, (family.name, sample)
            if family.type == "counter":
                assert sample.name == f"{family.name}_total", sample.name
            else:
                assert not sample.name.endswith("_total"), sample.name
    for name in JOB_HISTOGRAMS:
        assert types[name] == "histogram", (name, types.get(name))
    assert types["dpcrisis_http_request_duration_seconds"] == "histogram"
    assert types["dpcrisis_http_errors"] == "counter"


def test_latency_buckets_surround_the_10_ms_goal(client: TestClient) -> None:
    assert client.get("/v1/jobs/987654").status_code == 404
    bounds = {
        float(s.labels["le"])
        for f in text_string_to_metric_families(_page(client))
        if f.name == "dpcrisis_http_request_duration_seconds"
        for s in f.samples if s.name.endswith("_bucket")
    }
    assert {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, float("inf")} <= bounds


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install "
                    "prometheus); the test above checks the same rules without it")
def test_promtool_check_metrics_is_clean(
    client: TestClient, dataset: dict[str, Any], run_worker: Any
) -> None:
    _trained(client, dataset, run_worker)
    assert PROMTOOL is not None
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=_page(client),
                             capture_output=True, text=True, timeout=60, check=False)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), (
        checked.stdout + checked.stderr)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_worker_process_serves_its_own_histograms() -> None:
    before = job_metrics.QUEUE_WAIT.collect()[0]
    count = next(s.value for s in before.samples if s.name.endswith("_count"))
    server = job_metrics.serve_worker_metrics(_free_port())
    try:
        from datetime import UTC, datetime, timedelta

        now = datetime.now(UTC)
        job_metrics.observe_claim(created_at=now - timedelta(seconds=2), started_at=now)
        job_metrics.observe_training(steps=10, sample_rate=0.5, training_rows=100, seconds=0.5)
        port = server.server_address[1]
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        server.shutdown()
        server.server_close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples[("dpcrisis_job_queue_wait_seconds_count", ())] == count + 1
    assert samples[("dpcrisis_job_queue_wait_seconds_bucket", (("le", "1.0"),))] <= count
    assert samples[("dpcrisis_training_samples_per_second_bucket", (("le", "1000.0"),))] >= 1
    assert not any(name.endswith("_created") for name, _ in samples)
