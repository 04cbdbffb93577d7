"""CDS Hooks 2.0 authentication, checked as an EHR-side client would: JWTs signed with an
allow-listed issuer's RS384 or ES384 key are accepted once; HMAC, unknown issuers, another
endpoint's aud, expired, future and replayed tokens are 401 problems; API keys keep working;
a jwks_url is fetched and cached; CORS answers preflights on /cds-services only."""

from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from fastapi.testclient import TestClient

from app.cdshooks import jwks
from app.core.settings import CdsClient, Settings, settings
from app.main import create_app
from tests.api.scoring_helpers import problem
from tests.cdshooks.ehr import DISCOVERY_URL, ISSUER, SERVICE_URL, Ehr, bearer
from tests.cdshooks.test_cds_hooks import URL, hook_call
from tests.conftest import new_key


@pytest.fixture(scope="module")
def ehr() -> Ehr:
    return Ehr()


@pytest.fixture
def trusted(ehr: Ehr, monkeypatch: pytest.MonkeyPatch) -> Ehr:
    """``ehr`` allow-listed with its keys inline (an offline set-up)."""
    monkeypatch.setattr(settings, "dpcrisis_cds_base_url", "http://testserver")
    monkeypatch.setattr(settings, "dpcrisis_cds_clients", [CdsClient(iss=ehr.iss,
                                                                      jwks=ehr.jwks)])
    return ehr


def discover(client: TestClient, token: str) -> Any:
    return client.get("/cds-services", headers=bearer(token))


def call(client: TestClient, token: str) -> Any:
    """A hook call; no model is trained here, so passing authentication answers 404."""
    return client.post(URL, json=hook_call(), headers=bearer(token))


def refused(response: Any, because: str) -> None:
    body = problem(response, 401, kind="invalid-client-token")
    assert because in body["detail"], body
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'


@pytest.mark.parametrize("alg", ["RS384", "ES384"])
def test_signed_tokens_of_an_allowed_issuer_are_accepted(
    client: TestClient, trusted: Ehr, alg: str
) -> None:
    response = discover(client, trusted.token(alg=alg, aud=DISCOVERY_URL))
    assert response.status_code == 200, response.text
    assert response.json()["services"][0]["id"] in SERVICE_URL
    # aud may be an array too; the call passes authentication (no model: 404).
    problem(call(client, trusted.token(alg=alg, aud=[SERVICE_URL])), 404,
            kind="model-not-found")


def test_tokens_are_refused_for_each_broken_rule(client: TestClient, trusted: Ehr) -> None:
    secret = "an-hmac-secret-is-no-ehr-key-0123456789"
    hmac = jwt.encode({"iss": trusted.iss, "aud": SERVICE_URL, "exp": 2**33, "iat": 1,
                       "jti": "x"}, secret, algorithm="HS256")
    refused(call(client, hmac), "RS384 or ES384")
    unsigned = jwt.encode({"iss": trusted.iss, "aud": SERVICE_URL}, None, algorithm="none")
    refused(call(client, unsigned), "RS384 or ES384")
    refused(call(client, Ehr("https://unknown.example").token()), "not an allowed CDS client")
    impostor = Ehr(trusted.iss)  # the right iss and kid, another key
    refused(call(client, impostor.token()), "signature")
    refused(call(client, impostor.token(alg="RS384")), "signature")
    refused(call(client, trusted.token(aud=DISCOVERY_URL)), f"aud must be the endpoint "
                                                            f"called: {SERVICE_URL}")
    refused(call(client, trusted.token(aud="https://other.example/cds-services/x")), "aud")
    refused(call(client, trusted.token(iat_offset=-900)), "expired")
    refused(call(client, trusted.token(iat_offset=600)), "future")
    refused(call(client, trusted.token(lifetime=3600)), "at most 300 s")
    for claim in ("jti", "exp", "iat", "aud"):
        refused(call(client, trusted.token(drop=(claim,))), f"'{claim}'")
    refused(call(client, trusted.token(alg="RS384", kid="ec-1")), "no RSA signing key")
    refused(call(client, "not.a.jwt"), "not a readable JWT")


def test_a_replayed_token_is_refused_by_every_api_process(
    any_client: TestClient, trusted: Ehr
) -> None:
    """Seen jti live in the database: a second process (a second app on the same database)
    refuses a token the first accepted."""
    token = trusted.token(aud=DISCOVERY_URL)
    assert discover(any_client, token).status_code == 200
    with TestClient(create_app()) as other_process:
        refused(discover(other_process, token), "already used")
    refused(discover(any_client, token), "already used")
    # A new token (a new jti) passes.
    assert discover(any_client, trusted.token(aud=DISCOVERY_URL)).status_code == 200


def test_api_keys_keep_working(client: TestClient,
                               client_as: Any) -> None:
    assert client_as("clinician").get("/cds-services").status_code == 200
    problem(client_as("data_scientist").get("/cds-services"), 403)
    problem(client_as(None).get("/cds-services"), 401)
    problem(client_as(None).get("/cds-services", headers=bearer("dpk_000000000000_x")), 401)


class Seen(list[httpx.Request]):
    """The requests the JWKS endpoint saw; ``status`` is what it answers."""

    status = 200


@pytest.fixture
def jwks_server(ehr: Ehr, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    """``ehr`` allow-listed by a jwks_url, served by a mock transport."""
    seen = Seen()

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(seen.status, json=ehr.jwks)

    url = "https://ehr.example.org/.well-known/jwks.json"
    monkeypatch.setattr(jwks, "transport", httpx.MockTransport(serve))
    monkeypatch.setattr(settings, "dpcrisis_cds_base_url", "http://testserver")
    monkeypatch.setattr(settings, "dpcrisis_cds_clients", [CdsClient(iss=ISSUER,
                                                                      jwks_url=url)])
    jwks.forget()
    yield seen
    jwks.forget()


def test_a_jwks_url_is_fetched_once_and_cached(
    client: TestClient, ehr: Ehr, jwks_server: Seen,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for alg in ("ES384", "RS384", "ES384"):
        assert discover(client, ehr.token(alg=alg, aud=DISCOVERY_URL)).status_code == 200
    assert [str(r.url) for r in jwks_server] == [
        "https://ehr.example.org/.well-known/jwks.json"]
    # An unknown kid refetches (key rotation), at most once a REFRESH_SECONDS.
    refused(discover(client, ehr.token(kid="rotated", aud=DISCOVERY_URL)), "kid 'rotated'")
    assert len(jwks_server) == 1
    monkeypatch.setattr(jwks, "REFRESH_SECONDS", 0.0)
    refused(discover(client, ehr.token(kid="rotated", aud=DISCOVERY_URL)), "kid 'rotated'")
    assert len(jwks_server) == 2


def test_an_unreachable_jwks_url_is_a_503(
    client: TestClient, ehr: Ehr, jwks_server: Seen
) -> None:
    jwks_server.status = 500
    body = problem(discover(client, ehr.token(aud=DISCOVERY_URL)), 503,
                   kind="jwks-unavailable")
    assert "could not be read" in body["detail"]


def test_cors_preflight_on_cds_services_only(client: TestClient,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    preflight = {"Origin": "https://ehr.example.org", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    answer = client.options(URL, headers=preflight)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == "*"
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert "authorization" in answer.headers["access-control-allow-headers"].lower()
    simple = client.get("/cds-services", headers={"Origin": "https://ehr.example.org"})
    assert simple.headers["access-control-allow-origin"] == "*"
    # Other routes answer no preflight and carry no CORS header.
    other = client.options("/v1/risk", headers=preflight)
    assert "access-control-allow-origin" not in other.headers
    # Configured origins: that origin only.
    monkeypatch.setattr(settings, "dpcrisis_cds_cors_origins", ["https://ehr.example.org"])
    allowed = client.options(URL, headers=preflight)
    assert allowed.headers["access-control-allow-origin"] == "https://ehr.example.org"
    foreign = client.options(URL, headers={**preflight, "Origin": "https://evil.example"})
    assert foreign.status_code == 400
    assert "access-control-allow-origin" not in foreign.headers


def test_feedback_is_recorded(client: TestClient, trusted: Ehr) -> None:
    url = f"{URL}/feedback"
    item = {"card": "8d5f5d2e-0a53-4b52-9e36-8b8d5c1f2a11", "outcome": "overridden",
            "outcomeTimestamp": "2026-11-24T10:00:00Z",
            "overrideReason": {"reason": {"system": "https://ehr.example.org/reasons",
                                          "code": "not-relevant"},
                               "userComment": "patient Jane Doe says fine"}}
    token = trusted.token(aud=f"{SERVICE_URL}/feedback")
    response = client.post(url, json={"feedback": [item]}, headers=bearer(token))
    assert response.status_code == 200, response.text
    assert response.json() == {"received": 1}
    accepted = {**item, "outcome": "accepted", "acceptedSuggestions": [{"id": "s1"}]}
    key = new_key("clinician")
    assert client.post(url, json={"feedback": [accepted]},
                       headers=bearer(key)).status_code == 200
    problem(client.post(url, json={"feedback": [{**item, "outcome": "maybe"}]}), 422,
            field="feedback.0.outcome")
    problem(client.post("/cds-services/nope/feedback", json={"feedback": [item]}), 404)
    from sqlalchemy import select

    from app.cdshooks.models import CdsFeedback
    from app.core.database import get_database

    with get_database().session_scope() as session:
        rows = session.scalars(select(CdsFeedback).order_by(CdsFeedback.id)).all()
        assert [(r.outcome, r.override_reason, r.accepted_suggestions, r.actor)
                for r in rows][0] == ("overridden",
                                      "https://ehr.example.org/reasons|not-relevant", 0,
                                      f"cds:{ISSUER}")
        assert rows[1].outcome == "accepted" and rows[1].accepted_suggestions == 1
        assert "Jane" not in str([vars(r) for r in rows])


def test_a_spoofed_host_does_not_change_the_accepted_audience(
    client: TestClient, trusted: Ehr, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token the EHR minted for another CDS service, sent with that service's Host (or a
    forwarded proto), is refused: the audience is configuration, never the request's."""
    monkeypatch.setattr(settings, "dpcrisis_cds_base_url", "https://risk.clinic.example")
    other = "http://other.example/cds-services"
    token = trusted.token(aud=other)
    spoofed = {**bearer(token), "Host": "other.example", "X-Forwarded-Proto": "http"}
    response = client.get("/cds-services", headers=spoofed)
    assert response.status_code == 401, response.text
    assert "aud" in response.json()["detail"]
    ours = trusted.token(aud="https://risk.clinic.example/cds-services")
    assert discover(client, ours).status_code == 200


def test_without_a_base_url_no_jwt_is_accepted(
    client: TestClient, trusted: Ehr, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "dpcrisis_cds_base_url", None)
    response = discover(client, trusted.token(aud=DISCOVERY_URL))
    assert response.status_code == 401
    assert "DPCRISIS_CDS_BASE_URL" in response.json()["detail"]


def test_configured_clients_require_a_base_url(ehr: Ehr) -> None:
    with pytest.raises(ValueError, match="DPCRISIS_CDS_BASE_URL is required"):
        Settings(dpcrisis_cds_clients=[CdsClient(iss=ehr.iss, jwks=ehr.jwks)])
    assert Settings(dpcrisis_cds_clients=[CdsClient(iss=ehr.iss, jwks=ehr.jwks)],
                    dpcrisis_cds_base_url="https://risk.clinic.example").dpcrisis_cds_base_url
