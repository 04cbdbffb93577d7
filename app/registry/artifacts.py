"""Content-addressed model artifacts on disk; the hash in the database proves the bytes."""

import hashlib
import io
from pathlib import Path
from typing import Any

import torch
from torch import nn

from app.core.errors import Conflict
from app.core.settings import settings
from app.features import SCALING
from app.registry.network import build_network


class ArtifactCorrupt(RuntimeError):
    """The artifact's bytes no longer match the hash recorded for it."""


class ArtifactIncompatible(Conflict):
    """The model was trained with another feature scaling than this service applies."""

    kind, title = "model-incompatible", "Model trained with an older feature scaling"


def _path(sha256: str, root: Path | None = None) -> Path:
    return (root or settings.artifact_dir) / f"{sha256}.pt"


def save(network: nn.Module, config: dict[str, Any], root: Path | None = None) -> str:
    """Write the weights and their config; returns the SHA-256 that names the file."""
    buffer = io.BytesIO()
    state = {k: v.detach().cpu() for k, v in network.state_dict().items()}
    torch.save({"config": config, "state_dict": state}, buffer)
    data = buffer.getvalue()
    sha256 = hashlib.sha256(data).hexdigest()
    path = _path(sha256, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return sha256


def load(sha256: str, root: Path | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Load and verify an artifact; weights only (no pickled code is executed)."""
    data = _path(sha256, root).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ArtifactCorrupt(f"artifact {sha256} does not match its hash")
    payload = torch.load(io.BytesIO(data), weights_only=True)
    config = payload["config"]
    if config.get("scaling") != SCALING:
        # Scoring it with today's scaling would silently give wrong risks: refuse instead.
        raise ArtifactIncompatible(
            f"model artifact {sha256[:12]} was trained with feature scaling "
            f"{config.get('scaling')!r}, this service scales with {SCALING!r}: retrain it",
            field="model_id",
        )
    network = build_network(config["kind"], int(config.get("hidden_units", 16)))
    network.load_state_dict(payload["state_dict"])
    network.eval()
    return network, config
