"""An EHR as CDS Hooks 2.0 sees it: its signing keys (RSA for RS384, EC P-384 for ES384), the
JWK Set it publishes, and the JWTs it signs for each call."""

import time
import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from app.cdshooks.service import SERVICE_ID

ISSUER = "https://ehr.example.org/fhir"
BASE = "http://testserver"
SERVICE_URL = f"{BASE}/cds-services/{SERVICE_ID}"
DISCOVERY_URL = f"{BASE}/cds-services"


class Ehr:
    """An EHR with one RSA and one EC key; ``jwks`` is the public JWK Set it publishes."""

    def __init__(self, iss: str = ISSUER) -> None:
        self.iss = iss
        self.rsa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.ec = ec.generate_private_key(ec.SECP384R1())
        rsa_jwk = RSAAlgorithm.to_jwk(self.rsa.public_key(), as_dict=True)
        ec_jwk = ECAlgorithm.to_jwk(self.ec.public_key(), as_dict=True)
        self.jwks = {"keys": [{**rsa_jwk, "kid": "rsa-1", "alg": "RS384", "use": "sig"},
                              {**ec_jwk, "kid": "ec-1", "alg": "ES384", "use": "sig"}]}

    def token(self, *, alg: str = "ES384", aud: str | list[str] = SERVICE_URL,
              lifetime: int = 300, iat_offset: int = 0, kid: str | None = None,
              jti: str | None = None, drop: tuple[str, ...] = (), key: Any = None,
              **claims: Any) -> str:
        """A signed JWT as the spec describes it (``drop`` leaves claims out)."""
        now = int(time.time()) + iat_offset
        payload = {"iss": self.iss, "sub": "ehr-client-1", "aud": aud, "iat": now,
                   "exp": now + lifetime, "jti": jti or str(uuid.uuid4()), **claims}
        for name in drop:
            payload.pop(name)
        signing = key if key is not None else self.rsa if alg.startswith("RS") else self.ec
        kid = kid if kid is not None else "rsa-1" if alg.startswith("RS") else "ec-1"
        return jwt.encode(payload, signing, algorithm=alg, headers={"kid": kid, "typ": "JWT"})


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
