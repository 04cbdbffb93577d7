"""Site authentication: each clinic signs its answers to the coordinator with its own key.

Flower authenticates nodes only in its SuperLink deployment (``--enable-supernode-auth``), whose
client apps run outside the process that holds a clinic's lease and rows; the server this
product runs (``start_server``) accepts any client that reaches it. So the federation declares
each site's Ed25519 public key, and each answer a site sends (its round's weights, its final
evaluation) carries a signature over what it says: the federation, the site, the round, the
coordinator's fresh nonce for that round, a hash of the payload and the figures beside it. The
coordinator averages only answers whose signature verifies under the declared key of the site
they name; a replayed answer fails (the nonce is new each round), a stranger's fails (no key).

The keys are ``cryptography``'s Ed25519 (RFC 8032); what is written here is only the canonical
message and the key's one-line form (``ed25519:`` and the 32 raw bytes in base64).
"""

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

PREFIX = "ed25519:"
PUBLIC_KEY_PATTERN = r"^ed25519:[A-Za-z0-9+/]{43}=$"
FIT, EVALUATE = "fit", "evaluate"


def new_key() -> tuple[bytes, str]:
    """A fresh key: its private half as PEM (PKCS #8, unencrypted: keep it 0600) and its
    public half in the one-line form a federation declares."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    return pem, public_of(key)


def public_of(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    return PREFIX + base64.b64encode(raw).decode()


def load_private(path: Path) -> Ed25519PrivateKey:
    """The site's key from its PEM file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not an unencrypted Ed25519 private key.
    """
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key


def public_key(text: str) -> Ed25519PublicKey:
    """A declared key (``ed25519:...``). Raises ValueError when it is not one."""
    if not text.startswith(PREFIX):
        raise ValueError("a site's public key is 'ed25519:' and its 32 bytes in base64")
    raw = base64.b64decode(text[len(PREFIX):], validate=True)
    return Ed25519PublicKey.from_public_bytes(raw)


def arrays_sha256(arrays: list[np.ndarray]) -> str:
    """A hash of model weights as sent: each array's dtype, shape and bytes, in order."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(f"{array.dtype.str}{array.shape};".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def message(*, federation: str, site: str, kind: str, server_round: int, nonce: str,
            payload_sha256: str, figures: dict[str, Any]) -> bytes:
    """The canonical bytes a site signs and the coordinator verifies (sorted-key JSON)."""
    return json.dumps({"federation": federation, "site": site, "kind": kind,
                       "round": int(server_round), "nonce": nonce,
                       "payload_sha256": payload_sha256, "figures": figures},
                      sort_keys=True, separators=(",", ":")).encode()


def sign(key: Ed25519PrivateKey, signed: bytes) -> str:
    return base64.b64encode(key.sign(signed)).decode()


def verifies(declared: str, signed: bytes, signature: str) -> bool:
    """Whether ``signature`` (base64) is the declared key's over ``signed``; never raises."""
    try:
        public_key(declared).verify(base64.b64decode(signature, validate=True), signed)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True
