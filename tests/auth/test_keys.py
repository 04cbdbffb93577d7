"""API keys: created with a role, shown once, stored only as hashes, refused once revoked; the
``DPCRISIS_ADMIN_KEY`` start-up path and the ``dpcrisis keys`` commands on a real database."""

import hashlib
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select, text

from app import cli
from app.auth import service
from app.auth.models import ROLES, ApiKey
from app.auth.principal import Principal
from app.auth.schemas import Role
from app.core.database import Database, get_database, set_database
from app.core.errors import InvalidRequest
from app.core.settings import settings
from app.main import create_app
from tests.api.scoring_helpers import problem
from tests.conftest import bearer


def test_the_role_schema_matches_the_database_roles() -> None:
    assert [role.value for role in Role] == list(ROLES)


def test_a_key_is_stored_only_as_its_hash(any_db: Database) -> None:
    with any_db.session_scope() as session:
        key, secret = service.create(session=session, name="ds-1", role="data_scientist",
                                     principal=Principal.cli())
        key_id = key.id
    # dpk_<public id: 6 random bytes, hex>_<secret: 32 random bytes, base64url>
    assert re.fullmatch(r"dpk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", secret)
    with any_db.engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM api_key WHERE id = :id"), {"id": key_id})
        stored = dict(row.mappings().one())
    assert stored["key_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    assert stored["public_id"] == secret[4:16] and "prefix" not in stored
    dumped = repr(stored)
    assert not any(secret[17 + k:17 + k + 4] in dumped for k in range(40))


def test_authenticate_accepts_the_key_until_it_is_revoked(any_db: Database) -> None:
    with any_db.session_scope() as session:
        key, secret = service.create(session=session, name="po", role="privacy_officer",
                                     principal=Principal.cli())
    with any_db.session_scope() as session:
        found = service.authenticate(session=session, secret=secret)
        assert found is not None and found.id == key.id and found.role == "privacy_officer"
        assert service.authenticate(session=session, secret=secret + "x") is None
        assert service.authenticate(session=session, secret=secret[:-1]) is None
        service.revoke(session=session, key=found, principal=Principal.cli())
    with any_db.session_scope() as session:
        assert service.authenticate(session=session, secret=secret) is None


def test_names_are_unique_and_roles_known(db: Database) -> None:
    with db.session_scope() as session:
        service.create(session=session, name="same", role="clinician", principal=Principal.cli())
    with db.session_scope() as session, pytest.raises(service.KeyNameTaken):
        service.create(session=session, name="same", role="admin", principal=Principal.cli())
    with db.session_scope() as session, pytest.raises(InvalidRequest):
        service.create(session=session, name="x", role="superuser", principal=Principal.cli())
    with db.session_scope() as session, pytest.raises(InvalidRequest):
        service.create(session=session, name="has space", role="admin",
                       principal=Principal.cli())


def test_missing_unknown_and_revoked_keys_are_401_with_a_bearer_challenge(
    any_client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    anonymous = client_as(None)
    body = problem(anonymous.get("/v1/datasets"), 401, kind="unauthorized")
    assert "Authorization: Bearer" in body["detail"]
    response = anonymous.get("/v1/datasets")
    assert response.headers["www-authenticate"] == "Bearer"
    basic = anonymous.get("/v1/datasets", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    problem(basic, 401, kind="unauthorized")

    unknown = anonymous.get("/v1/datasets", headers=bearer("dpk_" + "A" * 43))
    problem(unknown, 401, kind="unauthorized")
    assert unknown.headers["www-authenticate"] == 'Bearer error="invalid_token"'

    created = any_client.post("/v1/keys", json={"name": "temp", "role": "data_scientist"})
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    key = created.json()
    holder = client_as(None)
    holder.headers.update(bearer(key["key"]))
    assert holder.get("/v1/datasets").status_code == 200
    revoked = any_client.delete(f"/v1/keys/{key['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    problem(holder.get("/v1/datasets"), 401, kind="unauthorized")
    assert any_client.delete(f"/v1/keys/{key['id']}").status_code == 200  # idempotent


def test_keys_api_never_shows_a_key_or_hash_after_creation(any_client: TestClient) -> None:
    created = any_client.post("/v1/keys", json={"name": "clinic-7", "role": "clinician"})
    assert created.status_code == 201, created.text
    secret = created.json()["key"]
    assert created.headers["location"] == f"/v1/keys/{created.json()['id']}"
    listing = any_client.get("/v1/keys")
    assert listing.status_code == 200
    assert "sha256" not in listing.text
    assert not any(secret[17 + k:17 + k + 4] in listing.text for k in range(40))
    names = {k["name"]: k for k in listing.json()["items"]}
    # The key's public part only: dpk_<public id>, never a character of the secret.
    assert names["clinic-7"]["prefix"] == secret[:16] and "key" not in names["clinic-7"]
    problem(any_client.post("/v1/keys", json={"name": "clinic-7", "role": "admin"}), 409)
    problem(any_client.post("/v1/keys", json={"name": "n", "role": "nurse"}), 422, field="role")
    problem(any_client.delete("/v1/keys/999999"), 404)


def test_ensure_admin_key_creates_once_and_never_revives(db: Database) -> None:
    secret = "a-long-operator-chosen-admin-key-0001"
    with db.session_scope() as session:
        created = service.ensure_admin_key(session=session, secret=secret)
        assert created is not None and created.role == "admin"
        assert created.name == service.ENV_KEY_NAME
    with db.session_scope() as session:
        assert service.ensure_admin_key(session=session, secret=secret) is None
        key = service.authenticate(session=session, secret=secret)
        assert key is not None
        service.create(session=session, name="ops", role="admin", principal=Principal.cli())
        service.revoke(session=session, key=key, principal=Principal.cli())
    with db.session_scope() as session:
        assert service.ensure_admin_key(session=session, secret=secret) is None
        assert service.authenticate(session=session, secret=secret) is None
        other_secret = "another-long-admin-key-0002"
        other = service.ensure_admin_key(session=session, secret=other_secret)
        assert other is not None
        # Told apart by a random suffix, never by characters of the secret.
        suffix = other.name.removeprefix(f"{service.ENV_KEY_NAME}-")
        assert re.fullmatch(r"[0-9a-f]{8}", suffix) and suffix not in other_secret
    with db.session_scope() as session, pytest.raises(ValueError, match="at least 24"):
        service.ensure_admin_key(session=session, secret="short")


def test_admin_key_from_the_environment_at_start_up(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "dpk_set-by-automation-at-start-up-0123456789"
    monkeypatch.setattr(settings, "dpcrisis_admin_key", SecretStr(secret))
    set_database(db)
    try:
        with TestClient(create_app(), headers=bearer(secret)) as web:
            assert web.get("/v1/keys").status_code == 200
        with TestClient(create_app(), headers=bearer(secret)) as web:  # a restart: still one
            names = [k["name"] for k in web.get("/v1/keys").json()["items"]]
    finally:
        set_database(None)
    assert names == [service.ENV_KEY_NAME]


def test_start_up_without_keys_says_how_to_make_one(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    set_database(db)
    try:
        with caplog.at_level(logging.WARNING), TestClient(create_app()):
            pass
    finally:
        set_database(None)
    assert "dpcrisis keys create --role admin" in caplog.text


@pytest.fixture
def cli_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``DATABASE_URL`` of a fresh SQLite file for in-process ``dpcrisis`` runs; the root
    logger's handlers are put back afterwards (the CLI configures logging)."""
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setattr(settings, "database_url", url)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    set_database(None)
    try:
        yield url
    finally:
        get_database().dispose()
        set_database(None)
        root.handlers[:] = handlers
        root.setLevel(level)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_creates_lists_and_revokes_keys(
    cli_database: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _run(capsys, "keys", "create", "--role", "clinician", "--name", "ward-3")
    assert code == 0
    secret = out.strip()
    assert secret.startswith("dpk_") and "\n" not in secret
    assert "shown this once" in err

    database = Database(cli_database)
    try:
        with database.session_scope() as session:
            key = service.authenticate(session=session, secret=secret)
            assert key is not None and key.name == "ward-3" and key.role == "clinician"
            stored = session.scalars(select(ApiKey)).all()
            assert all(secret not in repr(vars(k)) for k in stored)

        code, out, _ = _run(capsys, "keys", "create", "--role", "admin", "--name", "ops")
        admin_secret = out.strip()
        code, out, _ = _run(capsys, "keys", "list")
        assert code == 0 and "ward-3" in out and "clinician" in out and secret[:16] in out
        assert secret[17:] not in out and admin_secret[17:] not in out

        assert _run(capsys, "keys", "create", "--role", "admin", "--name", "ops")[0] == 2
        assert _run(capsys, "keys", "revoke", "ward-3")[0] == 0
        code, _, err = _run(capsys, "keys", "revoke", "ops")  # the last admin key: refused
        assert code == 2 and "last active admin key" in err
        assert _run(capsys, "keys", "create", "--role", "admin", "--name", "ops-2")[0] == 0
        code, out, _ = _run(capsys, "keys", "revoke", str(_id_of(database, "ops")))
        assert code == 0 and "'ops'" in out and "now revoked" in out
        assert _run(capsys, "keys", "revoke", "nobody")[0] == 2
        with database.session_scope() as session:
            assert service.authenticate(session=session, secret=secret) is None
            assert service.authenticate(session=session, secret=admin_secret) is None
            actions = session.execute(
                text("SELECT actor, action FROM audit_event ORDER BY id")).all()
        assert [tuple(a) for a in actions] == [
            ("cli", "key.created"), ("cli", "key.created"), ("cli", "key.revoked"),
            ("cli", "key.created"), ("cli", "key.revoked")]
    finally:
        database.dispose()


def _id_of(database: Database, name: str) -> Any:
    with database.session_scope() as session:
        return session.scalar(select(ApiKey.id).where(ApiKey.name == name))
