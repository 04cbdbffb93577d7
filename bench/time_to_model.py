"""Time to model: a default job on 8,000 rows, from ``POST /v1/jobs`` to a model that scores.

Runs the real service (``dpcrisis serve``: SQLite, embedded worker) in its own process and
drives it over loopback. Per run it prints the submission latency (planning the noise for the
target and reserving the budget), the queue pickup (submit -> running: the worker is woken,
not polled), training + evaluation + storing, and the first score. The baseline in the same run
is the same job with the worker left to its poll timer (``WORKER_POLL_SECONDS``, 1 s) instead
of being woken: the difference is what waking buys.

    python bench/time_to_model.py [--runs 5] [--target-epsilon 3]

Goal: <= 3 s on 2 CPU cores, through the API.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import processes, service  # noqa: E402

GOAL_SECONDS = 3.0
PATIENT = {"age": 34, "phq9": 22, "gaf": 35, "num_sessions": 12, "substance_use": 1,
           "prior_crisis": 0}


def start(var: Path, *, wake: bool) -> tuple[subprocess.Popen[bytes], str]:
    return service.start_server(var, env={"WORKER_POLL_SECONDS": "1.0",
                                          "WORKER_WAKE": "true" if wake else "false"})


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def one_job(client: httpx.Client, dataset_id: int, target: float) -> dict[str, float]:
    t0 = time.perf_counter()
    submitted = client.post("/v1/jobs", json={"dataset_id": dataset_id,
                                              "privacy": {"target_epsilon": target}})
    submitted.raise_for_status()
    t_submit = time.perf_counter() - t0
    job_id = submitted.json()["id"]
    while True:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.01)
    if job["status"] != "succeeded":
        raise SystemExit(f"job {job_id} ended {job['status']}: {job['error']}")
    risk = client.post("/v1/risk", json={"features": PATIENT, "model_id": job["model_id"]})
    risk.raise_for_status()
    total = time.perf_counter() - t0
    return {
        "total": total, "submit": t_submit,
        "pickup": _ts(job["started_at"]) - _ts(job["created_at"]),
        "train": _ts(job["finished_at"]) - _ts(job["started_at"]),
        "epsilon": job["progress"]["epsilon_spent"],
    }


def measure(wake: bool, runs: int, target: float) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        process, base = start(Path(tmp), wake=wake)
        try:
            with service.api_client(base, timeout=60) as client:
                dataset = client.post("/v1/datasets", json={
                    "name": "bench", "source": {"kind": "synthetic", "n_rows": 8000},
                    "privacy_budget": {"epsilon": 100, "delta": 1e-5}}).json()
                one_job(client, dataset["id"], target)  # warm-up (imports, first model load)
                return [one_job(client, dataset["id"], target) for _ in range(runs)]
        finally:
            processes.stop(process)


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--target-epsilon", type=float, default=3.0)
    args = parser.parse_args()
    woken = measure(True, args.runs, args.target_epsilon)
    polled = measure(False, args.runs, args.target_epsilon)
    print(f"# default job, 8,000 rows, target epsilon {args.target_epsilon}, "
          f"median of {args.runs} runs (after one warm-up)")
    print("| worker | total s | submit s | pickup s | train+eval+store s | epsilon |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, rows in (("woken (service)", woken), ("polled 1 s (baseline)", polled)):
        print(f"| {name} | {_median(rows, 'total'):.3f} | {_median(rows, 'submit'):.3f} | "
              f"{_median(rows, 'pickup'):.3f} | {_median(rows, 'train'):.3f} | "
              f"{max(r['epsilon'] for r in rows):.3f} |")
    total = _median(woken, "total")
    print(f"\ntime to model {total:.3f} s: {total / GOAL_SECONDS:.2f}x the 3 s goal "
          f"({'PASS' if total <= GOAL_SECONDS else 'FAIL'}); waking vs polling "
          f"{_median(polled, 'total') / total:.2f}x faster")


if __name__ == "__main__":
    main()
