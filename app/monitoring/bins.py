"""The public bins a monitoring run counts each feature on, from the declared schema alone.

Why public: the bins of a DP histogram must not depend on the data, or their placement would
leak it. They are a function of the feature's declared kind and bounds only, so the reference
release (on the training dataset) and every follow-up's release count on the same bins.

- numeric: ``NUMERIC_BINS`` equal-width bins over the declared [lower, upper];
- integer: one bin per value when there are at most ``NUMERIC_BINS`` values, else equal-width
  bins with integer edges (the last edge is ``upper + 1``: integers are counted in [e_k, e_k+1));
- binary and categorical: one bin per value (its code), counted as a ``count`` grouped by it.

A bin's centre (the mean of its edges; the code for a category) is where Wasserstein-1 places
its mass: in the feature's units, so a drift of 2.5 on PHQ-9 reads as 2.5 points.
"""

from dataclasses import dataclass

import numpy as np

from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind, FeatureSpec

NUMERIC_BINS = 10


@dataclass(frozen=True)
class FeatureBins:
    """One feature's public bins: ``edges`` for a numeric or integer feature (None for a
    binary or categorical one, counted per value), the centres, and the labels shown."""

    name: str
    kind: FeatureKind
    edges: list[float] | None
    centres: list[float]
    labels: list[str]

    @property
    def n_bins(self) -> int:
        return len(self.centres)

    def codes(self, values: np.ndarray) -> np.ndarray:
        """Each raw value's bin (values are within the declared bounds: ingestion checked)."""
        if self.edges is None:
            return np.clip(np.rint(values), 0, self.n_bins - 1).astype(np.int64)
        inner = np.asarray(self.edges[1:-1], dtype=np.float64)
        return np.searchsorted(inner, values, side="right").astype(np.int64)


def _integer_edges(lower: float, upper: float) -> list[float]:
    values = int(upper - lower) + 1
    step = max(1, int(np.ceil(values / NUMERIC_BINS)))
    edges = [float(e) for e in np.arange(lower, upper + 1, step, dtype=np.float64)]
    return [*edges, float(upper + 1)] if edges[-1] < upper + 1 else edges


def bins_of(feature: FeatureSpec) -> FeatureBins:
    lower, upper = feature.bounds
    if feature.kind in (FeatureKind.BINARY, FeatureKind.CATEGORICAL):
        labels = (["0", "1"] if feature.kind is FeatureKind.BINARY
                  else [str(c) for c in feature.categories or []])
        return FeatureBins(feature.name, feature.kind, None,
                           [float(k) for k in range(len(labels))], labels)
    if feature.kind is FeatureKind.INTEGER:
        edges = _integer_edges(lower, upper)
        centres = [(a + b - 1) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
    else:
        edges = [float(e) for e in np.linspace(lower, upper, NUMERIC_BINS + 1)]
        centres = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:], strict=True)]
    labels = [f"[{a:g}, {b:g})" for a, b in zip(edges[:-1], edges[1:], strict=True)]
    return FeatureBins(feature.name, feature.kind, [float(e) for e in edges],
                       [float(c) for c in centres], labels)


def schema_bins(schema: DatasetSchema) -> list[FeatureBins]:
    """Every feature's bins, in the schema's order."""
    return [bins_of(feature) for feature in schema.features]
