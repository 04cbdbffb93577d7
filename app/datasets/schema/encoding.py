"""From a declared schema to the model's inputs: public scaling, one-hot categories, players.

Every number here comes from the declaration, never from the data:

- a numeric, integer or binary feature is one input, its value clipped to the feature's model
  range (the public bounds, or the narrower declared ``model_lower``/``model_upper``) and mapped
  linearly onto [-1, 1]; binary 0/1 becomes -1/+1;
- a categorical feature with k categories is k one-hot inputs (0/1).

Raw rows hold one number per feature, in declaration order: the value, or for a categorical
feature the category's index. Each feature is one Shapley *player*: its inputs enter or leave a
coalition together, so a categorical feature gets one contribution, not one per category.

For the built-in schema this is exactly the scaling that models trained before schemas
used ("public-model-ranges-v2"), so those artifacts keep scoring the same.
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA, LEGACY_BUILT_IN_HASH
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind, schema_hash

SCALING = "schema-v3"
"""Recorded in every artifact: the encoding above, keyed by the schema's hash."""

LEGACY_SCALING = "public-model-ranges-v2"
"""Artifacts from before declared schemas: the built-in schema's encoding, unchanged."""


@dataclass(frozen=True)
class Encoder:
    """The encoding of one declared schema (built once per schema hash, see ``encoder_for``)."""

    schema: DatasetSchema

    @cached_property
    def hash(self) -> str:
        return schema_hash(self.schema)

    @cached_property
    def widths(self) -> tuple[int, ...]:
        """Model inputs per feature: k for a categorical feature with k categories, else 1."""
        return tuple(len(f.categories or ()) if f.kind is FeatureKind.CATEGORICAL else 1
                     for f in self.schema.features)

    @property
    def n_players(self) -> int:
        return len(self.schema.features)

    @property
    def n_inputs(self) -> int:
        return sum(self.widths)

    @cached_property
    def player_of_input(self) -> np.ndarray:
        """For each model input, the index of the feature (player) it belongs to."""
        return np.repeat(np.arange(self.n_players), self.widths)

    @cached_property
    def _ranges(self) -> tuple[np.ndarray, np.ndarray]:
        lower = np.array([f.model_range[0] for f in self.schema.features], dtype=np.float64)
        upper = np.array([f.model_range[1] for f in self.schema.features], dtype=np.float64)
        return lower, upper

    @cached_property
    def reference_raw(self) -> np.ndarray:
        """The public reference patient as a raw row (categorical: the category's index)."""
        return np.array([f.reference_value for f in self.schema.features], dtype=np.float64)

    @cached_property
    def reference_encoded(self) -> np.ndarray:
        return self.encode(self.reference_raw[None, :])[0]

    def encode(self, raw: np.ndarray) -> np.ndarray:
        """Raw rows (n, players) to model inputs (n, inputs), float64."""
        raw = np.asarray(raw, dtype=np.float64).reshape(-1, self.n_players)
        lower, upper = self._ranges
        out = np.zeros((raw.shape[0], self.n_inputs), dtype=np.float64)
        column = 0
        for j, (feature, width) in enumerate(zip(self.schema.features, self.widths, strict=True)):
            if feature.kind is FeatureKind.CATEGORICAL:
                codes = raw[:, j].astype(np.int64)
                out[np.arange(raw.shape[0]), column + codes] = 1.0
            else:
                mid, half = (upper[j] + lower[j]) / 2.0, (upper[j] - lower[j]) / 2.0
                out[:, column] = (np.clip(raw[:, j], lower[j], upper[j]) - mid) / half
            column += width
        return out


_BUILT: dict[str, Encoder] = {}


def encoder_for(schema: DatasetSchema) -> Encoder:
    """The schema's encoder, one per declaration (by its hash), shared by every caller."""
    digest = schema_hash(schema)
    if digest == LEGACY_BUILT_IN_HASH:  # stored before the built-in outcome declared its wording
        return BUILT_IN_ENCODER
    encoder = _BUILT.get(digest)
    if encoder is None:  # its own copy: the caller's schema object may be changed later
        encoder = _BUILT.setdefault(digest, Encoder(schema.model_copy(deep=True)))
    return encoder


def built_encoder(digest: str) -> Encoder:
    """An encoder ``encoder_for`` built, by its schema's hash: the key of caches that must not
    hold the (unhashable) schema itself."""
    return _BUILT[digest]


BUILT_IN_ENCODER = encoder_for(BUILT_IN_SCHEMA)
GENERATOR_ENCODER = BUILT_IN_ENCODER
"""The built-in generator's encoder, by the role outcome-neutral code gives it (what a service
describes while no model is active)."""
