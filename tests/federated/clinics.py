"""A coordinator and clinics as separate ``dpcrisis`` processes on loopback, each with its own
SQLite database and its own rows, for the federation's end-to-end test and its bench.

Each clinic is a ``dpcrisis serve`` with its embedded worker (the worker that holds the clinic's
rows runs its Flower client); the coordinator is a ``dpcrisis serve`` (to declare the
federation and read its report) and a ``dpcrisis federation-coordinator`` (Flower's server).

The clinics' rows: the synthetic generator at different sizes and case mixes (documented in
``CLINICS``): the largest is the generator as is, the middle one has its over-65 patients
follow another outcome model (``subgroup_effect``), the smallest is small.
"""

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.datasets.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.dataset_schema import schema_hash
from app.federation import signing
from tests.e2e.service import CLI, _free_port, api_client, server_log, service_env, start_server
from tests.e2e.service import wait_ready as wait_server

KEY_FILE = "site.pem"

CLINICS: tuple[tuple[str, int, str | None], ...] = (
    ("clinic-a", 20_000, None), ("clinic-b", 4_000, "subgroup_effect"), ("clinic-c", 800, None),
)
"""(site name, rows, the generator's documented shift): size and case mix differ."""

TEST_ROWS = {"clinic-a": 40_000}
"""The end-to-end tests' sizes where they differ from ``CLINICS`` (the bench keeps those). With
20,000 rows at the largest clinic the federation's summed held-out parts held 59-83 noisy
positives, and its evaluation reports no ROC-AUC below 40.5 (2 noise stds of the 19 summed
bins: 2 x 4.64 x sqrt(19)), so about one run in twenty-five had none; with 40,000 they hold
about 150, more than 5 stds of that sum (20.2) above the floor."""


@dataclass
class Service:
    """One running ``dpcrisis serve``: its directory, process, URL and keys by role."""

    root: Path
    process: subprocess.Popen[str]
    base: str
    keys: dict[str, str] = field(default_factory=dict)

    def http(self, role: str = "admin") -> httpx.Client:
        if role == "admin":
            return api_client(self.base)
        if role not in self.keys:
            with api_client(self.base) as admin:
                made = admin.post("/v1/keys", json={"name": f"{role}-{len(self.keys)}",
                                                    "role": role})
                assert made.status_code == 201, made.text
                self.keys[role] = made.json()["key"]
        return api_client(self.base, self.keys[role])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start(root: Path, **env: str) -> Service:
    """``dpcrisis serve`` on ``root``'s database; ``env`` overrides settings (upper-cased)."""
    root.mkdir(parents=True, exist_ok=True)
    if not env:
        process, base = start_server(root)
        return Service(root, process, base)
    port = _free_port()
    with (root / "serve.log").open("a") as out:
        process = subprocess.Popen(
            [CLI, "serve", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
            env={**service_env(root), **{k.upper(): v for k, v in env.items()}}, text=True)
    return Service(root, process, f"http://127.0.0.1:{port}")


def site_key(root: Path) -> dict[str, str]:
    """A new signing key in ``root`` (``dpcrisis federation-key``'s file), as the clinic's
    setting: ``launch`` declares its public half when every clinic has one."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / KEY_FILE
    path.write_bytes(signing.new_key()[0])
    return {"federation_site_key": str(path)}


def declared_keys(sites: list[Service]) -> list[str] | None:
    """Each clinic's public key, in order, when every clinic has a key file; else None."""
    paths = [site.root / KEY_FILE for site in sites]
    if not all(path.exists() for path in paths):
        return None
    return [signing.public_of(signing.load_private(path)) for path in paths]


def wait_ready(*services: Service) -> None:
    for service in services:
        wait_server(service.process, service.base)


def federation_body(*, role: str, address: str, site: str | None, rounds: int, local_steps: int,
                    epsilon: float, min_sites: int = 2, timeout: float = 60) -> dict[str, Any]:
    return {
        "name": "crisis-network", "role": role, "address": address,
        "schema_sha256": schema_hash(BUILT_IN_SCHEMA),
        "recipe": {"rounds": rounds, "local_steps": local_steps, "target_epsilon": epsilon,
                   "min_sites": min_sites, "round_timeout_seconds": timeout},
        "sites": [{"name": name} for name, _, _ in CLINICS],
        "site_name": site,
    }


def declare(service: Service, body: dict[str, Any]) -> int:
    with service.http() as admin:
        made = admin.post("/v1/federations", json=body)
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def register(service: Service, name: str, rows: int, seed: int, shift: str | None) -> int:
    source: dict[str, Any] = {"kind": "synthetic", "n_rows": rows, "seed": seed}
    if shift is not None:
        source["shift"] = shift
    with service.http("data_steward") as steward:
        made = steward.post("/v1/datasets", json={
            "name": name, "source": source,
            "privacy_budget": {"epsilon": 8.0, "delta": 1e-6}})
    assert made.status_code == 201, made.text
    return int(made.json()["id"])


def join(service: Service, federation_id: int, dataset_id: int) -> httpx.Response:
    with service.http("data_steward") as steward:
        return steward.post(f"/v1/federations/{federation_id}/join",
                            json={"dataset_id": dataset_id})


def coordinate(service: Service, federation_id: int, **env: str) -> subprocess.Popen[str]:
    """``dpcrisis federation-coordinator`` on the coordinator's database, logging to a file;
    ``env`` overrides settings (upper-cased)."""
    log = service.root / "coordinator.log"
    with log.open("w") as out:
        return subprocess.Popen(
            [CLI, "federation-coordinator", "--federation", str(federation_id)],
            env={**service_env(service.root), **{k.upper(): v for k, v in env.items()}},
            stdout=out, stderr=subprocess.STDOUT, text=True)


def job_when_final(service: Service, job_id: int, seconds: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    with service.http("data_scientist") as http:
        while time.monotonic() < deadline:
            job = http.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return dict(job)
            assert service.process.poll() is None, server_log(service.process)
            time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish: {server_log(service.process)}")


def address() -> str:
    return f"127.0.0.1:{_free_port()}"


@dataclass
class Launched:
    """A federation under way: its id at the coordinator, Flower's server, and each clinic's
    (dataset id, job id), in ``CLINICS`` order."""

    federation_id: int
    server: subprocess.Popen[str]
    parts: list[tuple[int, int]]


def launch(coordinator: Service, sites: list[Service], *, rounds: int, local_steps: int,
           epsilon: float, seed: int, name: str = "crisis-network", secure: bool = False,
           **coordinator_env: str) -> Launched:
    """Declare the federation everywhere (with the clinics' public keys when each has one,
    ``site_key``; ``secure``: every round through SecAgg+), start Flower's server, register
    each clinic's cohort (seeds ``seed``, ``seed + 1``, ...) and join with it."""
    address_ = address()
    declared = federation_body(role="coordinator", address=address_, site=None, rounds=rounds,
                               local_steps=local_steps, epsilon=epsilon)
    declared["name"] = name
    declared["recipe"]["secure_aggregation"] = secure
    keys = declared_keys(sites)
    if keys is not None:
        declared["sites"] = [{**site, "public_key": key}
                             for site, key in zip(declared["sites"], keys, strict=True)]
    federation_id = declare(coordinator, declared)
    server = coordinate(coordinator, federation_id, **coordinator_env)
    parts = []
    for offset, (site, (site_name, rows, shift)) in enumerate(zip(sites, CLINICS, strict=True)):
        here = declare(site, {**declared, "role": "site", "site_name": site_name})
        dataset_id = register(site, site_name, TEST_ROWS.get(site_name, rows), seed=seed + offset,
                              shift=shift)
        joined = join(site, here, dataset_id)
        assert joined.status_code == 202, joined.text
        parts.append((dataset_id, int(joined.json()["id"])))
    return Launched(federation_id, server, parts)
