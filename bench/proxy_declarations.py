"""How a proxy table is declared: its rows, its outcome and the schema a clinic would upload.

Shared by the built generators (``bench.proxies``) and the real public tables
(``bench.public_tables``), so that neither imports the other's internals.
"""

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.datasets.schema.dataset_schema import DatasetSchema


@dataclass(frozen=True)
class Proxy:
    name: str
    schema: DatasetSchema
    x: np.ndarray  # raw rows (n, features)
    y: np.ndarray  # 0/1 outcome
    real: bool  # a real public table (the confirmation set's kind)
    note: str


def numeric(name: str, lower: float, upper: float, reference: float,
             kind: str = "numeric", **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "lower": lower, "upper": upper,
            "reference": reference, **extra}


def binary(name: str, reference: int = 0) -> dict[str, Any]:
    return {"name": name, "kind": "binary", "reference": reference}


def categorical(name: str, categories: list[str], reference: str) -> dict[str, Any]:
    return {"name": name, "kind": "categorical", "categories": categories,
            "reference": reference}


def declared_schema(features: list[dict[str, Any]], outcome: str, label: str,
            bands: tuple[float, float]) -> DatasetSchema:
    """An upload's declaration: the outcome is labelled and declares its risk bands (public
    policy chosen from the stated prevalence, never read off the rows)."""
    low_medium, medium_high = bands
    return DatasetSchema.model_validate({"features": features, "outcome": {
        "name": outcome, "label": label,
        "bands": {"low_medium": low_medium, "medium_high": medium_high}}})
