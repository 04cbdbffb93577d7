"""Content-addressed model artifacts on disk; the hash in the database proves the bytes."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.errors import Conflict
from app.core.settings import settings
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from app.datasets.schema.encoding import LEGACY_SCALING, SCALING, encoder_for
from app.families import create_family, legacy_family_of

if TYPE_CHECKING:  # torch loads where a network is saved or read, not at the API's start
    from torch import nn


class ArtifactCorrupt(RuntimeError):
    """The artifact's bytes no longer match the hash recorded for it."""


class ArtifactIncompatible(Conflict):
    """The model was trained with another feature scaling or schema than it is loaded for."""

    kind, title = "model-incompatible", "Model trained with another feature scaling or schema"


def artifact_config(*, kind: str, hidden_units: int, calibration: str,
                    schema: DatasetSchema,
                    family_config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What an artifact records besides its weights: its family by name (and what the family
    needs to rebuild the network: ``family_config`` where its trainer fitted the shape, else
    the family's from ``hidden_units``), and the declared schema (and its hash) the network's
    inputs were encoded from."""
    family = (create_family(kind).artifact_config(hidden_units=hidden_units)
              if family_config is None else {**family_config, "kind": kind, "family": kind})
    return {**family,
            "scaling": SCALING, "calibration": calibration,
            "schema": schema.model_dump(mode="json"), "schema_hash": schema_hash(schema)}


def schema_in(config: dict[str, Any], sha256: str) -> DatasetSchema:
    """The schema an artifact was trained on; an artifact from before schemas is the built-in
    schema's (its scaling was exactly that encoding).

    Raises:
        ArtifactIncompatible: another scaling, or a schema that does not match its own hash.
    """
    scaling = config.get("scaling")
    if scaling == LEGACY_SCALING:
        return BUILT_IN_SCHEMA
    if scaling != SCALING:
        # Scoring it with today's scaling would silently give wrong risks: refuse instead.
        raise ArtifactIncompatible(
            f"model artifact {sha256[:12]} was trained with feature scaling {scaling!r}, "
            f"this service scales with {SCALING!r}: retrain it", field="model_id",
        )
    schema = DatasetSchema.model_validate(config["schema"])
    if schema_hash(schema) != config.get("schema_hash"):
        raise ArtifactIncompatible(
            f"model artifact {sha256[:12]}: its schema does not match its recorded hash",
            field="model_id",
        )
    return schema


def _path(sha256: str, root: Path | None = None) -> Path:
    return (root or settings.artifact_dir) / f"{sha256}.pt"


def save(network: nn.Module, config: dict[str, Any], root: Path | None = None) -> str:
    """Write the weights and their config; returns the SHA-256 that names the file."""
    import torch

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


def load(
    sha256: str, root: Path | None = None, *, expected_schema_hash: str | None = None
) -> tuple[nn.Module, dict[str, Any]]:
    """Load and verify an artifact; weights only (no pickled code is executed).

    Args:
        expected_schema_hash: the schema the caller will encode inputs with (the registered
            model's); an artifact trained on another declaration is refused.

    Raises:
        ArtifactCorrupt: the bytes do not match ``sha256``.
        ArtifactIncompatible: another scaling, or another schema than expected.
    """
    data = _path(sha256, root).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ArtifactCorrupt(f"artifact {sha256} does not match its hash")
    import torch

    payload = torch.load(io.BytesIO(data), weights_only=True)
    config = payload["config"]
    schema = schema_in(config, sha256)
    digest = schema_hash(schema)
    if expected_schema_hash is not None and digest != expected_schema_hash:
        raise ArtifactIncompatible(
            f"model artifact {sha256[:12]} was trained on schema {digest[:12]}, not on "
            f"{expected_schema_hash[:12]}", field="model_id",
        )
    # Derived once, here: the family the config names (legacy_family_of says how for an old one).
    family = legacy_family_of(config, payload["state_dict"])
    network = family.from_artifact(config, encoder_for(schema).n_inputs)
    network.load_state_dict(payload["state_dict"])
    network.eval()
    return network, {**config, "family": family.name}
