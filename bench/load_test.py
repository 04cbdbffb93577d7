"""Bounded load test of a real ``dpcrisis serve`` (embedded worker) over loopback.

N mixed requests from C concurrent clients (threads with httpx): register datasets, submit
small jobs (some refused by the budget: 409 is an answer, not an error), cancel some, read jobs
and privacy reports, score patients, list. A third of the creating POSTs carry an
``Idempotency-Key`` and are sent twice; the retry must return the same resource. Afterwards:
no 5xx and no transport error, every 202 job id exists and is distinct, every job ended
(succeeded; failed with a reason; or cancelled because we asked), and every dataset's ledger
chain verifies.

    python bench/load_test.py [--requests 2000] [--clients 20] [--postgres URL]

Prints requests/s, latency p50/p99 per route class and the counts; exits 1 on any failure.
"""

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import processes, service  # noqa: E402

# Route classes and their weights in the mix (reads dominate, as on a real dashboard).
MIX = {"register": 3, "submit": 7, "cancel": 2, "read": 25, "report": 10, "score": 30,
       "list": 23}
EXPECTED = {"register": {201}, "submit": {202, 409}, "cancel": {200, 409}, "read": {200},
            "report": {200}, "score": {200}, "list": {200}}
FINAL = ("succeeded", "failed", "cancelled")
BOUNDS = {"age": (18, 80), "phq9": (0, 27), "gaf": (1, 100), "num_sessions": (0, 50),
          "substance_use": (0, 1), "prior_crisis": (0, 1)}
SMALL_JOB = {"privacy": {"noise_multiplier": 1.2}, "training": {"epochs": 1, "batch_size": 64}}


@dataclass
class Tally:
    """What every client saw; shared, guarded by ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    datasets: list[int] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)  # every 202 (first attempts only)
    cancelled: set[int] = field(default_factory=set)
    replays: int = 0

    def record(self, kind: str, seconds: float, response: httpx.Response) -> None:
        with self.lock:
            self.latency[kind].append(seconds)
            self.statuses[(kind, response.status_code)] += 1
            if response.status_code not in EXPECTED[kind]:
                self.failures.append(f"{kind} {response.request.method} "
                                     f"{response.request.url.path}: {response.status_code} "
                                     f"{response.text[:200]}")


class Client:
    """One concurrent user: its own connection, random stream and share of the requests."""

    def __init__(self, base: str, key: str, tally: Tally, seed: int) -> None:
        self.http = httpx.Client(base_url=base, timeout=60,
                                 headers={"Authorization": f"Bearer {key}"})
        self.tally, self.rng, self.sent = tally, random.Random(seed), 0

    def send(self, kind: str, method: str, url: str, **kwargs: Any) -> httpx.Response | None:
        self.sent += 1
        start = time.perf_counter()
        try:
            response = self.http.request(method, url, **kwargs)
        except httpx.HTTPError as exc:
            with self.tally.lock:
                self.tally.failures.append(f"{kind} {method} {url}: transport {exc!r}")
            return None
        self.tally.record(kind, time.perf_counter() - start, response)
        return response

    def create(self, kind: str, url: str, body: dict[str, Any]) -> httpx.Response | None:
        """POST once, or (a third of the time) twice with one Idempotency-Key."""
        if self.rng.random() >= 1 / 3:
            return self.send(kind, "POST", url, json=body)
        headers = {"Idempotency-Key": f"load-{uuid.uuid4()}"}
        first = self.send(kind, "POST", url, json=body, headers=headers)
        retry = self.send(kind, "POST", url, json=body, headers=headers)
        if first is None or first.status_code >= 300:
            # A refused first attempt stored nothing, so its key is unused: the retry is a
            # fresh request and may succeed (e.g. budget freed by a cancel in between).
            return retry
        if retry is not None:
            same = retry.status_code < 300 and retry.json()["id"] == first.json()["id"]
            with self.tally.lock:
                self.tally.replays += 1
                if not same or retry.headers.get("Idempotency-Replayed") != "true":
                    self.tally.failures.append(f"idempotent retry of {url} gave "
                                               f"{retry.status_code} {retry.text[:200]}")
        return first

    def pick(self, items: list[int]) -> int | None:
        with self.tally.lock:
            return self.rng.choice(items[-50:]) if items else None

    def step(self) -> None:
        kind = self.rng.choices(list(MIX), weights=list(MIX.values()))[0]
        dataset, job = self.pick(self.tally.datasets), self.pick(self.tally.jobs)
        if kind == "register":
            body = {"name": f"load {self.rng.random():.6f} 🧠 مجموعة",
                    "source": {"kind": "synthetic", "n_rows": 400,
                               "seed": self.rng.randrange(1, 2**31 - 1)},
                    "privacy_budget": {"epsilon": 5, "delta": 1e-4}}
            response = self.create(kind, "/v1/datasets", body)
            if response is not None and response.status_code == 201:
                with self.tally.lock:
                    self.tally.datasets.append(response.json()["id"])
        elif kind == "submit" and dataset is not None:
            response = self.create(kind, "/v1/jobs", {"dataset_id": dataset, **SMALL_JOB})
            if response is not None and response.status_code == 202:
                with self.tally.lock:
                    self.tally.jobs.append(response.json()["id"])
        elif kind == "cancel" and job is not None:
            response = self.send(kind, "POST", f"/v1/jobs/{job}/cancel")
            if response is not None and response.status_code == 200:
                with self.tally.lock:
                    self.tally.cancelled.add(job)
        elif kind == "read" and job is not None:
            self.send(kind, "GET", f"/v1/jobs/{job}")
        elif kind == "report" and job is not None and dataset is not None:
            url = f"/v1/jobs/{job}/privacy-report" if self.rng.random() < 0.5 else \
                f"/v1/datasets/{dataset}/privacy-report"
            self.send(kind, "GET", url)
        elif kind == "score":
            patient = {k: self.rng.randint(lo, hi) for k, (lo, hi) in BOUNDS.items()}
            self.send(kind, "POST", "/v1/risk", json={"features": patient})
        else:
            url = self.rng.choice(["/v1/datasets?limit=20", "/v1/jobs?limit=20", "/v1/models",
                                   f"/v1/jobs?limit=10&offset={self.rng.randrange(50)}"])
            self.send("list", "GET", url)


def seed_model(http: httpx.Client, tally: Tally) -> None:
    """One trained, active model first, so scoring answers 200 from the start."""
    dataset = http.post("/v1/datasets", json={
        "name": "load seed", "source": {"kind": "synthetic", "n_rows": 400},
        "privacy_budget": {"epsilon": 5, "delta": 1e-4}}).json()["id"]
    job = http.post("/v1/jobs", json={"dataset_id": dataset, **SMALL_JOB}).json()["id"]
    tally.datasets.append(dataset)
    tally.jobs.append(job)
    wait_for_jobs(http, seconds=60)


def wait_for_jobs(http: httpx.Client, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        busy = sum(http.get("/v1/jobs", params={"status": s, "limit": 1}).json()["total"]
                   for s in ("queued", "running"))
        if busy == 0:
            return True
        time.sleep(0.2)
    return False


def verify(http: httpx.Client, tally: Tally, drain_seconds: float) -> list[str]:
    """The invariants after the load: jobs distinct, present and ended; ledgers verify."""
    problems: list[str] = []
    if len(set(tally.jobs)) != len(tally.jobs):
        problems.append("a job id was returned twice by distinct submissions")
    if not wait_for_jobs(http, drain_seconds):
        problems.append(f"jobs still queued or running after {drain_seconds:g} s")
    total = http.get("/v1/jobs", params={"limit": 1}).json()["total"]
    if total != len(set(tally.jobs)):
        problems.append(f"the service lists {total} jobs, clients were given {len(tally.jobs)}")
    for job_id in tally.jobs:
        job = http.get(f"/v1/jobs/{job_id}").json()
        reason_ok = (job["status"] == "succeeded" or (job["status"] == "failed" and job["error"])
                     or (job["status"] == "cancelled" and job_id in tally.cancelled))
        if job["status"] not in FINAL or not reason_ok:
            problems.append(f"job {job_id} ended {job['status']} ({job['error']})")
    for dataset_id in tally.datasets:
        check = http.get(f"/v1/datasets/{dataset_id}/ledger/verify").json()
        if not check.get("valid"):
            problems.append(f"dataset {dataset_id} ledger does not verify: {check}")
    return problems


def run_load(base: str, key: str, *, requests: int = 2000, clients: int = 20,
             seed: int = 0, drain_seconds: float = 120) -> dict[str, Any]:
    """Drive ``base`` and return the figures and every failure (empty when all held)."""
    tally = Tally()
    with httpx.Client(base_url=base, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as http:
        seed_model(http, tally)
        users = [Client(base, key, tally, seed * 1000 + i) for i in range(clients)]
        share = [requests // clients + (i < requests % clients) for i in range(clients)]

        def work(user: Client, quota: int) -> None:
            while user.sent < quota:
                user.step()

        threads = [threading.Thread(target=work, args=(u, q)) for u, q in zip(users, share,
                                                                               strict=True)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        for user in users:
            user.http.close()
        problems = tally.failures + verify(http, tally, drain_seconds)
    sent = sum(tally.statuses.values())
    return {
        "requests": sent, "clients": clients, "seconds": elapsed, "rps": sent / elapsed,
        "latency_ms": {k: _percentiles(v) for k, v in sorted(tally.latency.items())},
        "statuses": {f"{k} {s}": n for (k, s), n in sorted(tally.statuses.items())},
        "server_errors": sum(n for (_, s), n in tally.statuses.items() if s >= 500),
        "jobs": len(tally.jobs), "datasets": len(tally.datasets),
        "cancelled": len(tally.cancelled), "idempotent_retries": tally.replays,
        "failures": problems,
    }


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"n": len(values), "p50": 1000 * statistics.median(ordered), "p99": 1000 * p99}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", metavar="URL", help="a PostgreSQL URL (a fresh schema "
                        "search_path, e.g. ...?options=-csearch_path%%3Dload) instead of SQLite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {"DATABASE_URL": args.postgres} if args.postgres else {}
        process, base = service.start_server(Path(tmp), env=env)
        try:
            report = run_load(base, service.ADMIN_KEY, requests=args.requests,
                              clients=args.clients, seed=args.seed)
        finally:
            processes.stop(process)
    print(f"{report['requests']} requests from {report['clients']} clients in "
          f"{report['seconds']:.1f} s: {report['rps']:.0f} requests/s")
    print(f"{'route':<10}{'n':>7}{'p50 ms':>10}{'p99 ms':>10}")
    for kind, p in report["latency_ms"].items():
        print(f"{kind:<10}{p['n']:>7}{p['p50']:>10.1f}{p['p99']:>10.1f}")
    print("statuses:", json.dumps(report["statuses"]))
    print(f"jobs {report['jobs']} (cancelled {report['cancelled']}), datasets "
          f"{report['datasets']}, idempotent retries {report['idempotent_retries']}, "
          f"5xx {report['server_errors']}, failures {len(report['failures'])}")
    for failure in report["failures"][:20]:
        print("  FAIL", failure)
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
