"""`dpcrisis migrate`, `serve --no-worker` and a separate `dpcrisis worker` process."""

import signal
import subprocess
import time

import pytest

from bench.processes import CLI, api_client, service_env, start_server, wait_ready


@pytest.mark.slow
def test_separate_worker_process_trains_and_stops_on_sigterm(tmp_path) -> None:  # noqa: ANN001
    migrated = subprocess.run(
        [CLI, "migrate"], env=service_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert migrated.returncode == 0, migrated.stderr
    assert "newest migration" in migrated.stdout

    server, base = start_server(tmp_path, "--no-worker")
    worker: subprocess.Popen[str] | None = None
    try:
        wait_ready(server, base)
        http = api_client(base)
        dataset = http.post(
            "/v1/datasets",
            json={"name": "w", "source": {"kind": "synthetic", "n_rows": 2000, "seed": 3},
                  "privacy_budget": {"epsilon": 5, "delta": 1e-5}},
        ).json()
        job = http.post(
            "/v1/jobs",
            json={"dataset_id": dataset["id"], "privacy": {"noise_multiplier": 1.5},
                  "training": {"epochs": 3, "batch_size": 256}},
        ).json()
        time.sleep(1.0)
        assert http.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"  # no worker yet

        worker = subprocess.Popen(
            [CLI, "worker"], env=service_env(tmp_path),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        deadline = time.monotonic() + 60
        while http.get(f"/v1/jobs/{job['id']}").json()["status"] != "succeeded":
            assert time.monotonic() < deadline, "worker did not finish the job in 60 s"
            assert worker.poll() is None, worker.stdout.read() if worker.stdout else ""
            time.sleep(0.2)

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=15) == 0
    finally:
        for process in (worker, server):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
