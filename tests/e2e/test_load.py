"""A bounded load test on loopback: 2,000 mixed requests from 20 clients against a real
``dpcrisis serve`` with its embedded worker (bench/load_test.py holds the driver and the checks).

On SQLite (the default deployment) and, when it is reachable, on PostgreSQL. Each run must end
with no 5xx, no transport error, no lost or duplicated job, every job ended with a reason, and
every dataset's ledger chain verifying.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core.database import Database
from bench import processes, service
from bench.load_test import run_load
from tests.conftest import _postgres_database

REQUESTS, CLIENTS = 2000, 20

pytestmark = pytest.mark.slow


def _load(root: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    process, base = service.start_server(root, env=env)
    try:
        return run_load(base, service.ADMIN_KEY, requests=REQUESTS, clients=CLIENTS,
                        drain_seconds=60)
    finally:
        processes.stop(process)


def _check(report: dict[str, object]) -> None:
    print({k: v for k, v in report.items() if k != "failures"})  # figures, with -s
    assert report["failures"] == [], report["failures"]
    assert report["server_errors"] == 0
    assert report["requests"] >= REQUESTS
    assert report["jobs"] and report["idempotent_retries"], report  # the mix did both


def test_load_on_sqlite(tmp_path: Path) -> None:
    _check(_load(tmp_path))


@pytest.fixture
def pg_db(postgres_ready: bool) -> Iterator[Database]:
    if not postgres_ready:
        pytest.skip("PostgreSQL not reachable")
    yield from _postgres_database()


@pytest.mark.postgres
def test_load_on_postgres(tmp_path: Path, pg_db: Database) -> None:
    url = pg_db.url
    pg_db.dispose()  # the served process opens its own connections
    _check(_load(tmp_path, env={"DATABASE_URL": url}))
