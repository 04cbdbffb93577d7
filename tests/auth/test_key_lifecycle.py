"""The last admin key is never revoked (race-free), and keys are shown by a public id only.

Trial findings: ``DELETE /v1/keys/{id}`` of the only active admin key answered 200 and locked
everyone out; ``GET /v1/keys`` showed the first 12 characters of every key, half of a
minimum-length ``DPCRISIS_ADMIN_KEY``.
"""

import re
import threading
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import select, text

from app.auth import service
from app.auth.models import ApiKey
from app.auth.principal import Principal
from app.core.database import Database, get_database, set_database
from app.core.settings import settings
from app.core.time import utcnow
from app.main import create_app
from tests.api.scoring_helpers import problem
from tests.conftest import bearer


def _admin_id(client: TestClient) -> int:
    return next(k["id"] for k in client.get("/v1/keys").json()["items"]
                if k["name"] == "test-admin")


def test_the_last_admin_key_is_refused_with_409(
    any_client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    own = _admin_id(any_client)
    body = problem(any_client.delete(f"/v1/keys/{own}"), 409, kind="last-admin-key")
    assert "create another admin key first" in body["detail"]
    assert any_client.get("/v1/keys").status_code == 200  # still in
    events = any_client.get("/v1/audit-log", params={"action": "key.revoked"}).json()
    assert events["total"] == 0

    other = any_client.post("/v1/keys", json={"name": "second", "role": "admin"}).json()
    assert any_client.delete(f"/v1/keys/{own}").status_code == 200  # now another one is left
    second = client_as(None)
    second.headers.update(bearer(other["key"]))
    problem(second.delete(f"/v1/keys/{other['id']}"), 409, kind="last-admin-key")
    # Revoked and non-admin keys go as before; a revoked admin key does not count.
    clinician = second.post("/v1/keys", json={"name": "ward", "role": "clinician"}).json()
    assert second.delete(f"/v1/keys/{clinician['id']}").status_code == 200
    assert second.delete(f"/v1/keys/{own}").status_code == 200  # idempotent, already revoked


def test_two_admins_revoking_each_other_at_once_leave_one(
    any_client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    """Each of the only two admin keys revokes the other at the same moment, many times over:
    never both (which would leave no admin), always exactly one."""
    current = _admin_id(any_client)
    for round_ in range(8):
        keys = [any_client.post("/v1/keys", json={"name": f"a{round_}-{k}", "role": "admin"})
                .json() for k in range(2)]
        assert any_client.delete(f"/v1/keys/{current}").status_code == 200  # two admins left
        callers = []
        for key in keys:
            caller = client_as(None)
            caller.headers.update(bearer(key["key"]))
            callers.append(caller)
        statuses = _race(lambda k, keys=keys, callers=callers: callers[k].delete(
            f"/v1/keys/{keys[1 - k]['id']}").status_code)
        # The loser is refused as the last admin (409), or, when its request came after the
        # winner's commit, as a revoked key (401): never both 200.
        assert sorted(statuses)[0] == 200 and sorted(statuses)[1] in (401, 409), statuses
        with get_database().engine.connect() as conn:
            active = conn.execute(text("SELECT count(*) FROM api_key WHERE role = 'admin' "
                                       "AND revoked_at IS NULL")).scalar_one()
        assert active == 1
        survivor = statuses.index(200)  # its key revoked the other: it is the next round's admin
        any_client.headers.update(callers[survivor].headers)
        current = keys[survivor]["id"]


def test_concurrent_revocations_past_authentication_leave_one(any_db: Database) -> None:
    """Both calls have their key and the other's loaded before either revokes: the race the
    HTTP test hits only sometimes, every time."""
    for round_ in range(6):
        with any_db.session_scope() as session:
            for key in session.scalars(select(ApiKey).where(ApiKey.revoked_at.is_(None))):
                key.revoked_at = utcnow()  # start each round with exactly these two admins
            ids = [service.create(session=session, name=f"r{round_}-{k}", role="admin",
                                  principal=Principal.cli())[0].id for k in range(2)]
        loaded = threading.Barrier(2)

        def revoke(k: int, ids: list[int] = ids, loaded: threading.Barrier = loaded) -> int:
            with any_db.session_scope() as session:
                target = service.get(session=session, key_id=ids[1 - k])
                loaded.wait()
                try:
                    service.revoke(session=session, key=target, principal=Principal.cli())
                except service.LastAdminKey:
                    return 409
            return 200

        assert sorted(_race(revoke)) == [200, 409]
        with any_db.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM api_key WHERE role = 'admin' AND "
                                     "revoked_at IS NULL")).scalar_one() == 1


def _race(call: Callable[[int], int]) -> list[int]:
    """``call(0)`` and ``call(1)`` started at the same moment in two threads; their results."""
    start = threading.Barrier(2)
    results = [0, 0]

    def run(k: int) -> None:
        start.wait()
        results[k] = call(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_keys_are_listed_by_public_id_only(any_client: TestClient) -> None:
    created = any_client.post("/v1/keys", json={"name": "ward-9", "role": "clinician"}).json()
    secret = created["key"]
    assert re.fullmatch(r"dpk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", secret)
    assert created["prefix"] == secret[:16]  # dpk_<public id>: the key starts with it
    listing = any_client.get("/v1/keys").text
    assert secret[:16] in listing
    assert not any(secret[17 + k:17 + k + 4] in listing for k in range(40))


def test_keys_made_before_public_ids_keep_working_and_show_their_row_id(
    any_client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    """A key of the old form (``dpk_`` + 43 characters; the migration dropped its stored
    prefix) authenticates as before and is shown as ``key-<id>``."""
    old = "dpk_" + "Q" * 12 + "x" * 31
    with get_database().engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO api_key (name, role, public_id, key_sha256, created_at) "
            "VALUES ('legacy', 'data_scientist', NULL, :digest, CURRENT_TIMESTAMP)"
        ), {"digest": service.digest(old)})
    holder = client_as(None)
    holder.headers.update(bearer(old))
    assert holder.get("/v1/datasets").status_code == 200
    legacy = next(k for k in any_client.get("/v1/keys").json()["items"] if k["name"] == "legacy")
    assert legacy["prefix"] == f"key-{legacy['id']}"
    assert "QQQQ" not in any_client.get("/v1/keys").text


@pytest.mark.parametrize(("secret", "shown"), [
    ("an-operator-chosen-admin-key-0123456789", None),
    ("dpk_0123456789ab_" + "s" * 43, "dpk_0123456789ab"),
])
def test_an_environment_admin_key_shows_its_public_id_or_its_row_id(
    db: Database, monkeypatch: pytest.MonkeyPatch, secret: str, shown: str | None
) -> None:
    monkeypatch.setattr(settings, "dpcrisis_admin_key", SecretStr(secret))
    set_database(db)
    try:
        with TestClient(create_app(), headers=bearer(secret)) as web:
            (key,) = web.get("/v1/keys").json()["items"]
            text_ = web.get("/v1/keys").text
    finally:
        set_database(None)
    assert key["prefix"] == (shown or f"key-{key['id']}")
    secret_part = secret[17:] if shown else secret
    assert not any(secret_part[k:k + 8] in text_ for k in range(len(secret_part) - 7))


def test_the_cli_never_revokes_the_last_admin_key(db: Database) -> None:
    with db.session_scope() as session:
        key, _ = service.create(session=session, name="only", role="admin",
                                principal=Principal.cli())
    with db.session_scope() as session, pytest.raises(service.LastAdminKey):
        service.revoke(session=session, key=service.get(session=session, key_id=key.id),
                       principal=Principal.cli())
