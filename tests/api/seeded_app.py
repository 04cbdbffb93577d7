"""An app on one database for a whole test module, with a trained and active model.

Property-based tests send hundreds of requests; a fresh database and model per test would cost
more than the requests. The admin key is fixed (id 1) so schemathesis' auth hook knows it at
collection time; key id 2 is a decoy that fuzzed DELETEs may revoke instead.
"""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.auth import service as auth_service
from app.core.database import Database, set_database
from app.core.settings import settings
from app.main import create_app
from tests.conftest import FAST_TRAINING, bearer, new_key, small_dataset
from worker.runner import Worker

ADMIN_KEY = "dpk_seeded-admin-key-for-tests-only-0123456789"
ADMIN_KEY_ID, DECOY_KEY_ID = 1, 2


def seeded_client(databases: Iterator[Database], root: Path) -> Iterator[TestClient]:
    """An admin client on the one database ``databases`` yields, seeded with a dataset whose
    model is trained and active (so scoring answers 200, not 409)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(settings, "artifact_dir", root / "artifacts")
        for database in databases:
            set_database(database)
            try:
                with database.session_scope() as session:
                    auth_service.ensure_admin_key(session=session, secret=ADMIN_KEY)
                new_key("data_scientist", name="seeded-decoy")
                with TestClient(create_app(), headers=bearer(ADMIN_KEY)) as client:
                    dataset = client.post("/v1/datasets", json=small_dataset()).json()
                    job = client.post("/v1/jobs", json={
                        "dataset_id": dataset["id"], "privacy": {"target_epsilon": 3},
                        "training": FAST_TRAINING,
                    })
                    assert job.status_code == 202, job.text
                    assert Worker(database=database, worker_id="seeded").run_once()
                    yield client
            finally:
                set_database(None)
