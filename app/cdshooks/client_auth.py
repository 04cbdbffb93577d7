"""CDS Hooks 2.0 client authentication: each call carries a JWT the EHR signed.

``Authorization: Bearer <jwt>``, checked as the spec requires, with PyJWT:

- the header's ``alg`` is RS384 or ES384 (an asymmetric key; HMAC and ``none`` are refused
  before anything else is read), and the key (by ``kid``; without one, each key of the right
  type) is the issuer's own and of that type (RSA; EC on P-384);
- ``iss`` is an allow-listed client (``DPCRISIS_CDS_CLIENTS``), the signature verifies with
  one of its keys (``app.cdshooks.jwks``);
- ``aud`` is the URL of the endpoint called (``<base>/cds-services`` for discovery,
  ``<base>/cds-services/<id>`` for a service; its feedback URL or the service's for feedback);
- ``exp`` has not passed, and lies at most ``DPCRISIS_CDS_JWT_MAX_LIFETIME_S`` ahead (the spec's
  5 minutes); ``iat`` is not in the future; both with ``LEEWAY_SECONDS`` of clock skew;
- ``jti`` was not seen before from that issuer while the token lives: each accepted pair is
  written to the database (``CdsTokenSeen``), so a replay fails on any API process.

``sub`` and ``tenant`` are optional and only recorded. A refused token is a 401 problem
(``invalid-client-token``) whose detail says which check failed.
"""

import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from app.auth.service import KEY_PREFIX
from app.cdshooks import jwks
from app.cdshooks.models import CdsTokenSeen
from app.core.database import get_database
from app.core.errors import Unauthorized
from app.core.settings import CdsClient, settings

ALGORITHMS = {"RS384": "RSA", "ES384": "EC"}
"""The algorithms CDS Hooks allows, and the key type each needs."""
LEEWAY_SECONDS = 60
PURGE_SECONDS = 60.0


class InvalidClientToken(Unauthorized):
    kind, title = "invalid-client-token", "CDS client JWT refused"

    def __init__(self, detail: str) -> None:
        super().__init__(detail, error="invalid_token")


@dataclass(frozen=True)
class CdsCaller:
    iss: str
    sub: str | None
    jti: str


def looks_like_jwt(token: str) -> bool:
    """A compact JWS (three dot-separated parts), not one of this service's API keys."""
    return token.count(".") == 2 and not token.startswith(KEY_PREFIX)


def _unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise InvalidClientToken(f"not a readable JWT ({exc})") from None
    return header, claims


def _client(iss: Any) -> CdsClient:
    for client in settings.dpcrisis_cds_clients:
        if client.iss == iss:
            return client
    raise InvalidClientToken(f"issuer {iss!r} is not an allowed CDS client")


def _usable(key: dict[str, Any], alg: str, kid: Any) -> jwt.PyJWK | None:
    if kid is not None and key.get("kid") != kid:
        return None
    if key.get("kty") != ALGORITHMS[alg] or key.get("alg", alg) != alg:
        return None
    if key.get("use", "sig") != "sig" or (alg == "ES384" and key.get("crv") != "P-384"):
        return None
    try:
        return jwt.PyJWK(key, algorithm=alg)
    except jwt.PyJWTError:
        return None


def _decode(token: str, keys: list[jwt.PyJWK], alg: str, iss: str,
            audiences: list[str]) -> dict[str, Any]:
    failure: jwt.PyJWTError = jwt.InvalidSignatureError("no key")
    for key in keys:
        try:
            return jwt.decode(
                token, key=key, algorithms=[alg], audience=audiences, issuer=iss,
                leeway=LEEWAY_SECONDS,
                options={"require": ["iss", "aud", "exp", "iat", "jti"], "verify_iat": True})
        except jwt.InvalidSignatureError as exc:
            failure = exc  # another key of the issuer may verify it
        except jwt.PyJWTError as exc:
            raise InvalidClientToken(_explain(exc, audiences)) from None
    raise InvalidClientToken(f"the signature does not verify with the issuer's keys ({failure})")


def _explain(exc: jwt.PyJWTError, audiences: list[str]) -> str:
    if isinstance(exc, jwt.ExpiredSignatureError):
        return "the token has expired (exp)"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "the token is issued in the future (iat)"
    if isinstance(exc, jwt.InvalidAudienceError):
        return f"aud must be the endpoint called: {audiences[0]}"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"the token lacks the {exc.claim!r} claim (iss, aud, exp, iat, jti are required)"
    return f"the token is not valid ({exc})"


_last_purge = [0.0]


def _remember(iss: str, jti: str, exp: float) -> bool:
    """Record (iss, jti) until the token expires; False when it was already there."""
    digest = hashlib.sha256(f"{iss}\0{jti}".encode()).hexdigest()
    expires = datetime.fromtimestamp(exp + LEEWAY_SECONDS, tz=UTC)
    with get_database().session_scope() as session:
        if time.monotonic() - _last_purge[0] > PURGE_SECONDS:
            _last_purge[0] = time.monotonic()
            session.execute(delete(CdsTokenSeen).where(
                CdsTokenSeen.expires_at < datetime.now(tz=UTC)))
        session.add(CdsTokenSeen(token_sha256=digest, expires_at=expires))
        try:
            session.flush()
        except IntegrityError:
            session.rollback()
            return False
    return True


async def verify(token: str, *, audiences: list[str]) -> CdsCaller:
    """The allow-listed client that signed ``token`` for this endpoint, once.

    Args:
        audiences: the URLs ``aud`` may name (the endpoint called; its first is shown).

    Raises:
        InvalidClientToken: any check above fails (401).
        JwksUnavailable: the issuer's key set cannot be fetched (503).
    """
    header, unverified = _unverified(token)
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise InvalidClientToken(f"alg {alg!r} is not allowed: CDS clients sign with an "
                                 "asymmetric key, RS384 or ES384")
    client = _client(unverified.get("iss"))
    kid = header.get("kid")
    keys = [k for k in (_usable(d, alg, kid) for d in await jwks.keys_for(client, kid)) if k]
    if not keys:
        raise InvalidClientToken(f"the issuer has no {ALGORITHMS[alg]} signing key "
                                 + (f"with kid {kid!r}" if kid is not None else "for " + alg))
    claims = _decode(token, keys, alg, client.iss, audiences)
    ahead = float(claims["exp"]) - time.time()
    if ahead > settings.dpcrisis_cds_jwt_max_lifetime_s + LEEWAY_SECONDS:
        raise InvalidClientToken(f"exp lies {ahead:.0f} s ahead: at most "
                                 f"{settings.dpcrisis_cds_jwt_max_lifetime_s} s are allowed")
    jti = str(claims["jti"])
    if not await run_in_threadpool(_remember, client.iss, jti, float(claims["exp"])):
        raise InvalidClientToken("the token was already used (jti): each call needs a new one")
    sub = claims.get("sub")
    return CdsCaller(iss=client.iss, sub=sub if isinstance(sub, str) else None, jti=jti)
