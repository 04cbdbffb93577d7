"""Shared fixtures: a migrated database (SQLite file or a fresh PostgreSQL schema), the API
client bound to it, and a worker that runs jobs on demand."""

import copy
import io
import itertools
import logging
import os
import re
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.auth import service as auth_service
from app.auth.principal import Principal
from app.core.database import Database, get_database, set_database
from app.core.logs import ContextFilter, JsonFormatter
from app.core.migrations import upgrade_head
from app.core.settings import settings
from app.flows import index_upkeep
from app.main import create_app
from worker.runner import Worker

POSTGRES_URL = os.environ.get(
    "DPCRISIS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

# One torch thread, as every CPU worker runs (``Worker`` sets it on its first construction):
# a test's speed and floating-point sums then do not depend on which tests ran before it in
# this process, and parallel test processes do not fight over the cores.
torch.set_num_threads(1)

# Hypothesis keeps no example database (``./.hypothesis`` in the working tree): a test writes
# only under its temporary directory. A failure still prints the example and how to replay it.
hypothesis.settings.register_profile("no-database", database=None)
hypothesis.settings.load_profile("no-database")


@pytest.fixture(scope="session", autouse=True)
def _var_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The default database, artifacts and uploads (``./var/`` in a deployment) of this test
    process in a temporary folder of its own: a test that does not choose them writes nothing
    into the working tree, and parallel test processes never share a file."""
    var = tmp_path_factory.mktemp("var")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings, "database_url", f"sqlite:///{var / 'dpcrisis.db'}")
        patch.setattr(settings, "artifact_dir", var / "artifacts")
        patch.setattr(settings, "data_dir", var / "data")
        yield


def _postgres_available() -> bool:
    try:
        engine = create_engine(POSTGRES_URL)
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
        return True
    except Exception:  # noqa: BLE001
        return False


@pytest.fixture(scope="session")
def postgres_ready() -> bool:
    ok = _postgres_available()
    if not ok and os.environ.get("CI"):
        pytest.fail(f"PostgreSQL is required in CI and is not reachable at {POSTGRES_URL}")
    return ok


_template: list[Path] = []


def _migrated_template() -> Path:
    """One SQLite database migrated to head, once per test session."""
    if not _template:
        path = Path(tempfile.mkdtemp(prefix="dpcrisis-template-")) / "template.db"
        upgrade_head(f"sqlite:///{path}")
        _template.append(path)
    return _template[0]


def _sqlite_database(tmp_path: Path) -> Iterator[Database]:
    """A fresh SQLite database at head: a copy of the session's migrated template (SQLite's
    backup API, consistent whatever the journal mode), not 12 migrations per test."""
    path = tmp_path / "test.db"
    source, target = sqlite3.connect(_migrated_template()), sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()
    db = Database(f"sqlite:///{path}")
    yield db
    index_upkeep.wait_idle(timeout=60)  # an upload's index upkeep ends with its test
    db.dispose()


def _postgres_database() -> Iterator[Database]:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    try:
        upgrade_head(url)
        db = Database(url)
        yield db
        index_upkeep.wait_idle(timeout=60)
        db.dispose()
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A freshly migrated database, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        yield from _sqlite_database(tmp_path)
    else:
        if not request.getfixturevalue("postgres_ready"):
            pytest.skip("PostgreSQL not reachable")
        yield from _postgres_database()


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    """A freshly migrated SQLite database (the default deployment)."""
    yield from _sqlite_database(tmp_path)


@pytest.fixture
def artifact_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "artifacts"
    monkeypatch.setattr(settings, "artifact_dir", path)
    return path


def new_key(role: str, name: str | None = None) -> str:
    """A fresh API key of ``role`` in the current database (its plaintext)."""
    with get_database().session_scope() as session:
        _, secret = auth_service.create(
            session=session, name=name or f"test-{role}-{uuid.uuid4().hex[:8]}", role=role,
            principal=Principal.cli(),
        )
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


# The test clients ask for an upload's synchronous answer (``PUT .../data`` waits for its
# ingest, which the app's own ingest thread runs); a test of the 202 path sends
# ``Prefer: ""`` (no preference) itself.
SYNC_UPLOADS = {"Prefer": "wait=60"}


def _client(database: Database) -> Iterator[TestClient]:
    """A client calling as an admin (every route admits admin); ``client_as`` for other roles.
    Jobs run when a test calls ``run_worker``; uploads are ingested by the app's own ingest
    thread (``create_app(ingest_uploads=True)``)."""
    set_database(database)
    try:
        admin = new_key("admin", name="test-admin")
        app = create_app(embedded_worker=False, ingest_uploads=True)
        with TestClient(app, headers={**bearer(admin), **SYNC_UPLOADS}) as client:
            yield client
    finally:
        set_database(None)


@pytest.fixture
def client(db: Database, artifact_dir: Path) -> Iterator[TestClient]:
    """API client on SQLite; jobs run only when a test calls ``run_worker``."""
    yield from _client(db)


@pytest.fixture
def any_client(any_db: Database, artifact_dir: Path) -> Iterator[TestClient]:
    """API client on SQLite and on PostgreSQL."""
    yield from _client(any_db)


@pytest.fixture
def client_as(request: pytest.FixtureRequest) -> Callable[[str | None], TestClient]:
    """``client_as("clinician")``: a client on the same app and database with a fresh key of
    that role; ``client_as(None)`` sends no key. Use with ``client`` or ``any_client``."""
    name = "any_client" if "any_client" in request.fixturenames else "client"
    base: TestClient = request.getfixturevalue(name)

    def make(role: str | None) -> TestClient:
        headers = {} if role is None else bearer(new_key(role))
        return TestClient(base.app, headers={**headers, **SYNC_UPLOADS})

    return make


@pytest.fixture
def run_worker(request: pytest.FixtureRequest) -> Any:
    """Run queued jobs to completion in this thread; returns how many ran."""

    def run(limit: int = 10) -> int:
        database = (
            request.getfixturevalue("any_db")
            if "any_db" in request.fixturenames
            else request.getfixturevalue("db")
        )
        worker = Worker(database=database, worker_id="test-worker")
        ran = 0
        while ran < limit and worker.run_once():
            ran += 1
        return ran

    return run


SMALL_DATASET = {
    "name": "small",
    "source": {"kind": "synthetic", "n_rows": 2000, "seed": 11},
    "privacy_budget": {"epsilon": 10.0, "delta": 1e-5},
}
@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every record of every logger, as the service writes it (JSON lines), at DEBUG."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


_registrations = itertools.count()


@pytest.fixture(autouse=True)
def _fresh_sources() -> None:
    """Each test's first ``small_dataset()`` is SMALL_DATASET itself (seed 11)."""
    global _registrations
    _registrations = itertools.count()


def small_dataset(**overrides: Any) -> dict[str, Any]:
    """SMALL_DATASET with a seed of its own: the service refuses a source registered twice.

    The first call in a test gives seed 11, the next ones other seeds.
    """
    body = copy.deepcopy(SMALL_DATASET)
    body["source"]["seed"] += 1000 * next(_registrations)  # type: ignore[index]
    body.update(overrides)
    return body


FAST_TRAINING = {"epochs": 3, "batch_size": 256}
PATIENT = {
    "age": 34,
    "phq9": 22,
    "gaf": 35,
    "num_sessions": 12,
    "substance_use": 1,
    "prior_crisis": 1,
}


@pytest.fixture
def dataset(client: TestClient) -> dict[str, Any]:
    response = client.post("/v1/datasets", json=small_dataset())
    assert response.status_code == 201, response.text
    return response.json()


# Fixtures that put HTTP between a test and the code it checks (the test client, a served
# process, a browser): a test using any of them is an API test, every other a unit test.
HTTP_FIXTURES = frozenset({"client", "any_client", "client_as", "server", "live_server",
                           "service", "page", "sqlite_app", "postgres_app"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The PostgreSQL variants run in the full suite (CI), not in the fast lane: the fast lane
    (``-m "not slow"``) checks everything once, on SQLite. Every test is also marked ``api`` or
    ``unit`` (``-m unit`` runs the service tests of every package apart from the API tests)."""
    for item in items:
        if item.get_closest_marker("postgres") is not None:
            item.add_marker(pytest.mark.slow)
        names = set(getattr(item, "fixturenames", ()))
        served = item.path.parent.name in ("e2e", "browser")  # they start processes themselves
        item.add_marker(pytest.mark.api if served or names & HTTP_FIXTURES
                        else pytest.mark.unit)


_WHOLLY_SLOW = re.compile(r"^pytestmark = \[?pytest\.mark\.slow\b", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """When ``-m`` leaves slow out, a module marked slow as a whole (``pytestmark =
    pytest.mark.slow`` at its top level) is not even imported: none of its tests would run, and
    importing one costs every test process seconds (the OpenAPI fuzzing builds each operation's
    examples as it is collected)."""
    if not (collection_path.name.startswith("test_") and collection_path.suffix == ".py"):
        return None
    if not _leaves_slow_out(config.getoption("markexpr") or ""):
        return None
    return True if _WHOLLY_SLOW.search(collection_path.read_text(encoding="utf-8")) else None


def _leaves_slow_out(markexpr: str) -> bool:
    """Whether ``markexpr`` deselects every test marked slow, whatever its other marks:
    ``not slow`` alone or at the end of a chain of ``and`` (no ``or`` to let one back in)."""
    words = markexpr.replace("(", " ( ").replace(")", " ) ").split()
    chained = len(words) == 2 or (len(words) > 3 and words[-3] == "and")
    return words[-2:] == ["not", "slow"] and chained and not {"or", "(", ")"} & set(words)


SHARED_PACKAGES = ("tests/browser/",)
"""Packages whose tests share a package-scoped fixture (the browser tests' served process and
Chromium): each runs on one worker, so the fixture starts once."""


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent under ``-p no:xdist``
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` (``addopts``) with the packages of ``SHARED_PACKAGES`` kept whole.

    loadscope sends each module (or class) to one worker, so a module-scoped fixture (a served
    process, a trained model) starts once per run, not once per worker; xdist's ``loadgroup``
    would group by marker instead, but it renames node ids in a way pytest 9.2 ignores.
    """
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        """loadscope whose unit for a shared package is the package: a small subclass of
        xdist's scheduler, overriding the one method its own loadfile and loadgroup modes
        override."""

        def _split_scope(self, nodeid: str) -> str:
            package = next((p for p in SHARED_PACKAGES if nodeid.startswith(p)), None)
            return package if package is not None else str(super()._split_scope(nodeid))

    return SharedFixtureScheduling(config, log)


_LANE_SECONDS = {"fast": 0.0, "slow": 0.0}
_STARTED = time.monotonic()
"""When this process (with xdist, the controller) loaded the test configuration."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each test's setup, call and teardown by lane, so the full run (CI) also says what
    the fast lane (``-m "not slow"``) costs on this machine, without running it twice. With
    xdist this runs in the controller on the workers' reports: ``keywords`` carries the
    markers across (the controller collects no items of its own)."""
    _LANE_SECONDS["slow" if "slow" in report.keywords else "fast"] += report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say what each lane's tests took (the fast lane's goal: under 3 minutes of wall time on
    2 cores) and what this run took on the wall, and say it loudly when the browser tests were
    skipped for want of Debian's chromium: the README's test command would otherwise pass
    without ever opening the dashboard."""
    workers = getattr(terminalreporter.config.option, "numprocesses", None) or 0
    terminalreporter.write_sep(
        "-", f"tests' own time by lane: fast lane (not slow) {_LANE_SECONDS['fast']:.0f} s, "
        f"slow {_LANE_SECONDS['slow']:.0f} s; this run {time.monotonic() - _STARTED:.0f} s "
        f"wall on {workers or 1} process(es)")
    skipped = [report for report in terminalreporter.stats.get("skipped", [])
               if "chromium" in str(getattr(report, "longrepr", ""))]
    if skipped:
        terminalreporter.write_sep(
            "!", f"{len(skipped)} browser test module(s) SKIPPED: /usr/bin/chromium is missing "
            "(apt-get install chromium fonts-liberation; .ci/run installs it)", red=True)
