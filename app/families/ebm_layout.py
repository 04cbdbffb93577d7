"""DP-EBM's view of a declared schema, and a fitted EBM's shape functions as plain tables.

Everything interpret is told about a feature comes from the declaration:

- a numeric or integer feature is ``continuous`` with its **model range** as
  ``privacy_bounds`` (the public bounds, or the narrower declared scaling range), its values
  clipped to that range first: the scoring model's encoded input holds the clipped value, so
  the EBM is fitted on exactly what it will be scored on;
- a binary or categorical feature is ``continuous`` over its codes, with the public bounds
  (-0.5, k - 0.5) for k declared categories (a binary's two).

Interpret's ``nominal`` and ordinal types are not used: in 0.7.8 their private binning takes
its categories from ``np.unique`` of the rows, not from the declaration, so one patient with a
rare category changes which bins are released (and can fold a common category into "other").
A histogram over a public range has the same cells whatever the rows are, so every feature is
binned that way; boosting then splits codes in their declared order, which an additive shape
over a few codes fits as well.

A fitted EBM is then one intercept and, per feature, its cuts (raw units; a value equal to a
cut falls in the bin above it, as interpret's ``discretize``) and one score per bin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind


@dataclass(frozen=True)
class InterpretLayout:
    """The arguments interpret's DP-EBM takes for a schema's features."""

    feature_names: list[str]
    feature_types: list[str]
    privacy_bounds: dict[int, tuple[float, float]]


def layout(schema: DatasetSchema) -> InterpretLayout:
    """Feature names, types and privacy bounds from the declaration alone (module docstring)."""
    bounds: dict[int, tuple[float, float]] = {}
    for index, feature in enumerate(schema.features):
        if feature.kind in (FeatureKind.BINARY, FeatureKind.CATEGORICAL):
            bounds[index] = (-0.5, feature.bounds[1] + 0.5)
        else:
            bounds[index] = feature.model_range
    return InterpretLayout([f.name for f in schema.features],
                           ["continuous"] * len(schema.features), bounds)


def interpret_rows(schema: DatasetSchema, raw: np.ndarray) -> np.ndarray:
    """Raw rows (n, features; categorical: the code) as interpret is fitted on them: each
    numeric value clipped to its model range, codes as they are."""
    rows = np.array(raw, dtype=np.float64).reshape(-1, len(schema.features))
    for index, feature in enumerate(schema.features):
        if feature.kind not in (FeatureKind.BINARY, FeatureKind.CATEGORICAL):
            lower, upper = feature.model_range
            rows[:, index] = np.clip(rows[:, index], lower, upper)
    return rows


LOG_ODDS_STRETCH = 3.0
"""What the family multiplies its fitted shape functions by before the DP calibration.

DP-EBM's boosting takes small gradient steps without the Hessian, so its log-odds come out
compressed (the log-loss-optimal slope on held-out rows is well above 1). The DP calibration's
bins are wide and its slope prior is centred at 1, so a compressed model's log-odds fall in
one or two bins and the released slope stays near 1. Stretched by a public constant, the terms
spread over the bins and the calibration corrects the rest; the constant was chosen on the
proxy tables of ``bench/family_choice.py`` (``--stretch``) and confirmed on its confirm set.
The intercept is kept: stretching it would move every patient's risk by the prevalence's
log-odds."""


@dataclass(frozen=True)
class ShapeTables:
    """A fitted EBM: log-odds = intercept + sum_j scores[j][bin_j(x_j)], where bin_j counts
    the cuts at or below x_j (raw units)."""

    intercept: float
    cuts: tuple[np.ndarray, ...]
    scores: tuple[np.ndarray, ...]  # len(cuts[j]) + 1 each

    def stretched(self, factor: float) -> ShapeTables:
        """The same tables with every feature's scores times ``factor`` and the intercept
        kept (``LOG_ODDS_STRETCH``): post-processing of the released model."""
        return ShapeTables(self.intercept, self.cuts,
                           tuple(np.asarray(table) * factor for table in self.scores))

    def log_odds(self, rows: np.ndarray) -> np.ndarray:
        """The EBM's log-odds of ``interpret_rows`` (a reference for the torch network)."""
        out = np.full(len(rows), self.intercept)
        for j, (cuts, scores) in enumerate(zip(self.cuts, self.scores, strict=True)):
            out += scores[np.searchsorted(cuts, rows[:, j], side="right")]
        return out


class UnexpectedModel(ValueError):
    """A fitted object that is not the mains-only, binary, continuous EBM this family fits."""


def shape_tables(model: Any, n_features: int) -> ShapeTables:
    """The tables of a fitted ``DPExplainableBoostingClassifier`` (``bins_``, ``term_scores_``:
    index 0 is the missing bin and the last the unseen one, neither reachable here).

    Raises:
        UnexpectedModel: interactions, a reordered or missing term, a categorical bin map, or
            a link other than the logit.
    """
    if getattr(model, "link_", None) != "logit":
        raise UnexpectedModel("not a binary classifier with a logit link")
    if [tuple(t) for t in model.term_features_] != [(j,) for j in range(n_features)]:
        raise UnexpectedModel("terms are not the features' mains in order")
    cuts, scores = [], []
    for j in range(n_features):
        found = model.bins_[j][0]
        if not isinstance(found, np.ndarray):
            raise UnexpectedModel(f"feature {j} was not binned as continuous")
        table = np.asarray(model.term_scores_[j], dtype=np.float64)
        if table.shape != (len(found) + 3,):
            raise UnexpectedModel(f"feature {j}: {table.shape[0]} scores for {len(found)} cuts")
        cuts.append(np.asarray(found, dtype=np.float64))
        scores.append(table[1:-1].copy())
    intercept = np.asarray(model.intercept_, dtype=np.float64).reshape(-1)
    if intercept.shape != (1,):
        raise UnexpectedModel("not one intercept")
    return ShapeTables(float(intercept[0]), tuple(cuts), tuple(scores))
