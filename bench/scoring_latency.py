"""Scoring latency against its goals: single patient at 200 requests/s, and 10,000 in one call.

Setting: a real ``dpcrisis serve --no-worker`` in its own process (temporary SQLite
database) and a ``dpcrisis worker`` process train the README's default job (8,000 rows, target
epsilon 3); the worker is then stopped and this process loads the server over loopback:

- single patient: ``POST /v1/risk`` open-loop at 200 requests/s (a request's latency runs from
  the moment it was due, so a server that falls behind is charged for the queueing), random
  patients; p50 and p99 against the goal p99 <= 10 ms;
- batch: ``POST /v1/risk/batch`` with 10,000 random patients, wall time until the whole answer
  has arrived (median of the runs) against the goal <= 1 s.

Both processes share the machine: on 2 CPU cores the client's own work counts against the
figures. Run: .venv/bin/python bench/scoring_latency.py [--seconds 10] [--batch-runs 5]
"""

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.features import FEATURE_NAMES, LOWER, UPPER  # noqa: E402
from bench import processes, service  # noqa: E402

RATE, P99_GOAL_S, BATCH_N, BATCH_GOAL_S = 200, 0.010, 10_000, 1.0
CLIENT_THREADS = 4
WORKER_ENV = {"WORKER_POLL_SECONDS": "0.2"}


def start_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``dpcrisis serve --no-worker``: no worker thread polls the database while we measure."""
    return service.start_server(root, "--no-worker", env=WORKER_ENV)


def train_default_model(http: httpx.Client) -> int:
    dataset = http.post("/v1/datasets", json={
        "name": "bench", "source": {"kind": "synthetic", "n_rows": 8000, "seed": 7},
        "privacy_budget": {"epsilon": 8, "delta": 1e-5}})
    dataset.raise_for_status()
    job = http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"],
                                      "privacy": {"target_epsilon": 3}})
    job.raise_for_status()
    while (state := http.get(job.headers["location"]).json())["status"] in ("queued", "running"):
        time.sleep(0.2)
    if state["status"] != "succeeded":
        raise SystemExit(f"training did not succeed: {state}")
    return int(state["model_id"])


def random_patients(n: int, seed: int) -> list[dict[str, int]]:
    rng = np.random.default_rng(seed)
    rows = np.rint(rng.uniform(LOWER, UPPER, size=(n, len(FEATURE_NAMES)))).astype(int)
    return [dict(zip(FEATURE_NAMES, map(int, row), strict=True)) for row in rows]


def single_latencies(base: str, seconds: float) -> tuple[list[float], int]:
    """Open-loop load at RATE/s; returns latencies from each request's due time, and errors."""
    bodies = [json.dumps({"features": p}).encode() for p in random_patients(1000, seed=1)]
    due: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    host, port = base.removeprefix("http://").split(":")
    headers = {"content-type": "application/json", **service.AUTH}

    def client() -> None:
        # http.client, not httpx: a lighter client leaves more of a 2-core machine to the server.
        http = HTTPConnection(host, int(port), timeout=10)
        while (item := due.get()) is not None:
            at, body = item
            time.sleep(max(0.0, at - time.perf_counter()))
            http.request("POST", "/v1/risk", body=body, headers=headers)
            response = http.getresponse()
            response.read()
            elapsed = time.perf_counter() - at
            with lock:
                latencies.append(elapsed)
                errors[0] += response.status != 200
        http.close()

    threads = [threading.Thread(target=client) for _ in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    start = time.perf_counter() + 0.2
    total = int(seconds * RATE)
    for k in range(total):
        at = start + k / RATE
        time.sleep(max(0.0, at - 0.05 - time.perf_counter()))  # stay ahead of the clients
        due.put((at, bodies[k % len(bodies)]))
    for _ in threads:
        due.put(None)
    for t in threads:
        t.join()
    return latencies, errors[0]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux), to tell work from waiting."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch_times(http: httpx.Client, runs: int, pid: int) -> tuple[list[float], list[float]]:
    """Wall time of each 10,000-patient call (until the whole answer is in), and server CPU."""
    body = {"patients": [{"id": str(k), "features": p}
                         for k, p in enumerate(random_patients(BATCH_N, seed=2))]}
    content = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    times, cpu = [], []
    for _ in range(runs):
        cpu_before = cpu_seconds(pid)
        started = time.perf_counter()
        response = http.post("/v1/risk/batch", content=content, headers=headers)
        times.append(time.perf_counter() - started)
        cpu.append(cpu_seconds(pid) - cpu_before)
        response.raise_for_status()
    assert len(response.json()["results"]) == BATCH_N
    return times, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--batch-runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        process, base = start_server(Path(tmp))
        try:
            with service.api_client(base, timeout=120) as http:
                # The worker in its own process, stopped once the model is trained.
                worker = service.run_cli(Path(tmp), "worker", env=WORKER_ENV)
                try:
                    model_id = train_default_model(http)
                finally:
                    processes.stop(worker, seconds=60)
                for _ in range(20):  # warm up: model load, first requests
                    http.post("/v1/risk", json={"features": random_patients(1, 0)[0]})
                cpu_before = cpu_seconds(process.pid)
                latencies, errors = single_latencies(base, args.seconds)
                single_cpu = (cpu_seconds(process.pid) - cpu_before) / max(1, len(latencies))
                batches, batch_cpu = batch_times(http, args.batch_runs, process.pid)
        finally:
            processes.stop(process)

    ms = sorted(1000 * x for x in latencies)
    p50 = statistics.median(ms)
    p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))]
    batch = statistics.median(batches)
    print(f"model {model_id}; {os.cpu_count()} CPU cores seen; load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    print(f"single patient, {RATE}/s open loop for {args.seconds:g} s: {len(ms)} requests, "
          f"{errors} errors; p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms")
    print(f"  p99 / goal ({1000 * P99_GOAL_S:g} ms) = {p99 / (1000 * P99_GOAL_S):.2f}; "
          f"server CPU time per request {1000 * single_cpu:.2f} ms")
    print(f"batch of {BATCH_N:,}: median {batch:.2f} s over {len(batches)} runs "
          f"(best {min(batches):.2f} s); server CPU time per call "
          f"{statistics.median(batch_cpu):.2f} s")
    print(f"  batch / goal ({BATCH_GOAL_S:g} s) = {batch / BATCH_GOAL_S:.2f}")


if __name__ == "__main__":
    main()
