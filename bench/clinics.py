"""A coordinator and clinics as separate ``dpcrisis`` processes on loopback, each with its own
SQLite database and its own rows, for the federation's bench (``bench/federated.py``) and its
end-to-end tests (``tests/federated/test_federation_e2e.py``).

Each clinic is a ``dpcrisis serve`` with its embedded worker (the worker that holds the clinic's
rows runs its Flower client); the coordinator is a ``dpcrisis serve`` (to declare the
federation and read its report) and a ``dpcrisis federation-coordinator`` (Flower's server).

The clinics' rows: the synthetic generator at different sizes and case mixes (documented in
``CLINICS``): the largest is the generator as is, the middle one has its over-65 patients
follow another outcome model (``subgroup_effect``), the smallest is small.
"""

import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import schema_hash
from app.federation import signing
from bench import processes

KEY_FILE = "site.pem"

CLINICS: tuple[tuple[str, int, str | None], ...] = (
    ("clinic-a", 20_000, None), ("clinic-b", 4_000, "subgroup_effect"), ("clinic-c", 800, None),
)
"""(site name, rows, the generator's documented shift): size and case mix differ."""


@dataclass
class Service:
    """One running ``dpcrisis serve``: its directory, process, URL and keys by role, and the
    other processes started on its database (the coordinator's Flower server), which ``stop``
    ends with it."""

    root: Path
    process: subprocess.Popen[str]
    base: str
    keys: dict[str, str] = field(default_factory=dict)
    children: list[subprocess.Popen[str]] = field(default_factory=list)

    def http(self, role: str = "admin") -> httpx.Client:
        if role == "admin":
            return processes.api_client(self.base)
        if role not in self.keys:
            with processes.api_client(self.base) as admin:
                made = admin.post("/v1/keys", json={"name": f"{role}-{len(self.keys)}",
                                                    "role": role})
                if made.status_code != 201:
                    raise RuntimeError(f"a {role} key at {self.base}: {made.text[:500]}")
                self.keys[role] = made.json()["key"]
        return processes.api_client(self.base, self.keys[role])

    def stop(self) -> None:
        """The service and what was started on its database, each with its process group."""
        for process in (*self.children, self.process):
            processes.stop(process)


def start(root: Path, **env: str) -> Service:
    """``dpcrisis serve`` on ``root``'s database; ``env`` overrides settings (upper-cased)."""
    root.mkdir(parents=True, exist_ok=True)
    process, base = processes.start_server(root, **env)
    return Service(root, process, base)


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


def wait_ready(*services: Service, seconds: float = processes.READY_SECONDS) -> None:
    """Until every service answers /readyz (``processes.NotReady`` otherwise)."""
    for service in services:
        processes.wait_ready(service.process, service.base, seconds)


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
    if made.status_code != 201:
        raise RuntimeError(f"declaring at {service.base}: {made.text[:500]}")
    return int(made.json()["id"])


def register(service: Service, name: str, rows: int, seed: int, shift: str | None) -> int:
    source: dict[str, Any] = {"kind": "synthetic", "n_rows": rows, "seed": seed}
    if shift is not None:
        source["shift"] = shift
    with service.http("data_steward") as steward:
        made = steward.post("/v1/datasets", json={
            "name": name, "source": source,
            "privacy_budget": {"epsilon": 8.0, "delta": 1e-6}})
    if made.status_code != 201:
        raise RuntimeError(f"registering {name} at {service.base}: {made.text[:500]}")
    return int(made.json()["id"])


def join(service: Service, federation_id: int, dataset_id: int) -> httpx.Response:
    with service.http("data_steward") as steward:
        return steward.post(f"/v1/federations/{federation_id}/join",
                            json={"dataset_id": dataset_id})


def coordinate(service: Service, federation_id: int, **env: str) -> subprocess.Popen[str]:
    """``dpcrisis federation-coordinator`` on the coordinator's database, logging to a file;
    ``env`` overrides settings (upper-cased). Stopped with ``service``."""
    server = processes.spawn(["federation-coordinator", "--federation", str(federation_id)],
                             env=processes.service_env(service.root, **env),
                             log=service.root / "coordinator.log")
    service.children.append(server)
    return server


def job_when_final(service: Service, job_id: int, seconds: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    with service.http("data_scientist") as http:
        while time.monotonic() < deadline:
            job = http.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                return dict(job)
            if service.process.poll() is not None:
                raise RuntimeError(f"{service.base} exited: "
                                   f"{processes.server_log(service.process)}")
            time.sleep(0.5)
    raise TimeoutError(f"job {job_id} did not finish in {seconds:g} s: "
                       f"{processes.server_log(service.process)}")


def address() -> str:
    """A loopback address for Flower's server that no other service here was given."""
    return f"127.0.0.1:{processes.free_port()}"


@dataclass
class Launched:
    """A federation under way: its id at the coordinator, Flower's server, and each clinic's
    (dataset id, job id), in ``CLINICS`` order."""

    federation_id: int
    server: subprocess.Popen[str]
    parts: list[tuple[int, int]]


def launch(coordinator: Service, sites: list[Service], *, rounds: int, local_steps: int,
           epsilon: float, seed: int, name: str = "crisis-network", secure: bool = False,
           sizes: Mapping[str, int] | None = None, **coordinator_env: str) -> Launched:
    """Declare the federation everywhere (with the clinics' public keys when each has one,
    ``site_key``; ``secure``: every round through SecAgg+), start Flower's server, register
    each clinic's cohort (seeds ``seed``, ``seed + 1``, ...; ``sizes`` overrides a clinic's
    rows in ``CLINICS``) and join with it."""
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
        dataset_id = register(site, site_name, (sizes or {}).get(site_name, rows),
                              seed=seed + offset, shift=shift)
        joined = join(site, here, dataset_id)
        if joined.status_code != 202:
            raise RuntimeError(f"{site_name} joining: {joined.text[:500]}")
        parts.append((dataset_id, int(joined.json()["id"])))
    return Launched(federation_id, server, parts)
