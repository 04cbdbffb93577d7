"""docker/: the compose file and the images, checked without a container engine.

What would only fail at ``docker compose up`` is checked here: services and their health
checks, volumes, a worker that can scale, and that every command the images and compose run is
a real ``dpcrisis`` subcommand with valid arguments.
"""

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import build_parser
from app.core.settings import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))


def _compose(name: str = "compose.yaml") -> dict[str, Any]:
    return yaml.safe_load((DOCKER / name).read_text())


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def _argv(value: str | list[str]) -> list[str]:
    """An exec-form (JSON list) or shell-form command as argv."""
    if isinstance(value, list):
        return [str(v) for v in value]
    return json.loads(value) if value.startswith("[") else shlex.split(value)


def _commands() -> list[tuple[str, list[str]]]:
    """Every command the images and the compose services run: CMD, command, health checks."""
    found = []
    for dockerfile in DOCKERFILES:
        for keyword, rest in _instructions(dockerfile):
            if keyword == "CMD":
                found.append((dockerfile.name, _argv(rest)))
            elif keyword == "HEALTHCHECK":
                found.append((dockerfile.name, _argv(rest.split("CMD", 1)[1].strip())))
    for name, service in _compose()["services"].items():
        if "command" in service:
            found.append((f"compose {name}", _argv(service["command"])))
        test = service["healthcheck"]["test"]
        found.append((f"compose {name} healthcheck", test[1:] if test[0] == "CMD" else test))
    return found


def test_services_have_health_checks_and_start_in_order() -> None:
    services = _compose()["services"]
    assert set(services) == {"db", "api", "worker"}
    for service in services.values():
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
    assert services["api"]["depends_on"]["db"]["condition"] == "service_healthy"
    # The API migrates before it is healthy; workers start only then.
    assert services["worker"]["depends_on"]["api"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        url = services[name]["environment"]["DATABASE_URL"]
        assert url.startswith("postgresql+psycopg://") and "@db:5432/" in url


def test_volumes_keep_the_database_and_the_artifacts() -> None:
    compose = _compose()
    assert {"pgdata", "artifacts"} <= set(compose["volumes"])
    services = compose["services"]
    assert "pgdata:/var/lib/postgresql/data" in services["db"]["volumes"]
    for dockerfile in DOCKERFILES:
        assert "ARTIFACT_DIR=/data/artifacts" in dockerfile.read_text()
    for name in ("api", "worker"):
        assert "artifacts:/data/artifacts" in services[name]["volumes"]


def test_the_worker_can_scale() -> None:
    """``--scale worker=N`` needs no fixed name and no host port; it must not need a GPU."""
    worker = _compose()["services"]["worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert "deploy" not in worker  # a GPU reservation fails on hosts without NVIDIA
    gpu = _compose("compose.gpu.yaml")["services"]["worker"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert int(re.sub(r"\D", "", worker["stop_grace_period"])) >= 30  # time to stop cleanly


@pytest.mark.parametrize("where, argv", _commands(), ids=lambda v: str(v)[:40])
def test_every_entry_point_is_a_dpcrisis_subcommand(where: str, argv: list[str]) -> None:
    if argv[0] != "dpcrisis":
        assert argv[0] in ("python", "pg_isready"), f"{where}: unexpected command {argv}"
        return
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{where}: `{shlex.join(argv)}` is not a valid dpcrisis command ({exc})")
    assert callable(args.func)


def test_there_are_entry_points_for_api_worker_and_health() -> None:
    subcommands = {argv[1] for _, argv in _commands() if argv[0] == "dpcrisis"}
    assert {"serve", "worker", "check"} <= subcommands


def test_images_copy_what_exists_and_pin_the_same_torch() -> None:
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    torch_pin = re.search(r'"torch==([^"]+)"', pyproject).group(1)  # type: ignore[union-attr]
    for dockerfile in DOCKERFILES:
        for keyword, rest in _instructions(dockerfile):
            if keyword == "COPY":
                for source in rest.split()[:-1]:
                    assert (REPO_ROOT / source).exists(), f"{dockerfile.name}: COPY {source}"
        assert f"torch=={torch_pin}" in dockerfile.read_text(), dockerfile.name
    assert ".venv" in (REPO_ROOT / ".dockerignore").read_text().split()


def test_the_federated_compose_gives_each_clinic_its_own_service_and_volume() -> None:
    compose = _compose("compose.federated.yaml")
    services = compose["services"]
    clinics = [name for name in services if name.startswith("clinic-")]
    assert len(clinics) == 3
    volumes = {tuple(services[name]["volumes"]) for name in clinics}
    assert len(volumes) == 3, "each clinic keeps its rows and its ledger on its own volume"
    for name in [*clinics, "coordinator", "coordinator-rounds"]:
        # compose substitutes ${VAR:-default}: its default, as an unset variable gives
        argv = [re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", a) for a in _argv(services[name]["command"])]
        args = build_parser().parse_args(argv[1:])
        assert callable(args.func)
        assert services[name]["build"]["args"]["EXTRAS"] == "postgres,federated"
    rounds = _argv(services["coordinator-rounds"]["command"])
    assert rounds[1] == "federation-coordinator"
    for name in clinics:  # each signs its answers with its key, kept on its own volume
        key = services[name]["environment"]["FEDERATION_SITE_KEY"]
        assert key.startswith(services[name]["volumes"][0].split(":")[1] + "/")
    assert services["coordinator-rounds"]["volumes"] == services["coordinator"]["volumes"]
