"""A fitted DP-EBM as a torch network over the service's encoded inputs, and the fit itself.

The network computes what interpret's ``decision_function`` computes, from the encoded row the
scorer, the calibration and the artifact store already pass around: an intercept plus, per
declared feature, the score of the bin its value falls in. A numeric, integer or binary
feature reads its one encoded input against its cuts mapped into encoded units by the
encoder's own affine map (so a value equal to a cut stays equal to it, and falls above it, as
in interpret); a categorical feature's one-hot block picks its category's score. Its
``terms`` are each feature's score: relative to the reference patient's they are the model's
exact Shapley values (an additive model's), which is what scoring reports for this family.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind
from app.datasets.schema.encoding import Encoder
from app.families.ebm_accounting import EbmNoise
from app.families.ebm_layout import ShapeTables, interpret_rows, layout, shape_tables

BINS, TABLE = "bins", "table"


@dataclass(frozen=True)
class TermSpec:
    """Where one feature's term reads its input: ``bins`` (one input, ``size`` cuts) or
    ``table`` (a one-hot block of ``size`` inputs), starting at input ``start``."""

    kind: str
    start: int
    size: int

    def as_list(self) -> list[Any]:
        return [self.kind, self.start, self.size]


class AdditiveNetwork(nn.Module):
    """Log-odds = intercept + sum of per-feature terms, in float64 whatever the input dtype."""

    intercept: torch.Tensor

    def __init__(self, specs: Sequence[TermSpec]) -> None:
        super().__init__()
        self.specs = tuple(specs)
        self.register_buffer("intercept", torch.zeros((), dtype=torch.float64))
        # the output layer the DP calibration folds its map into (identity until then)
        self.out = nn.Linear(1, 1, dtype=torch.float64)
        with torch.no_grad():
            self.out.weight.fill_(1.0)
            self.out.bias.zero_()
        for j, spec in enumerate(self.specs):
            values = spec.size + 1 if spec.kind == BINS else spec.size
            self.register_buffer(f"cuts_{j}", torch.zeros(spec.size if spec.kind == BINS else 0,
                                                          dtype=torch.float64))
            self.register_buffer(f"scores_{j}", torch.zeros(values, dtype=torch.float64))

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Each feature's bin score (n, features), float64, before the output layer."""
        out = torch.empty((x.shape[0], len(self.specs)), dtype=torch.float64, device=x.device)
        for j, spec in enumerate(self.specs):
            scores = getattr(self, f"scores_{j}")
            if spec.kind == BINS:
                cuts = getattr(self, f"cuts_{j}").to(x.dtype)
                column = x[:, spec.start].contiguous()
                out[:, j] = scores[torch.searchsorted(cuts, column, right=True)]
            else:
                out[:, j] = x[:, spec.start:spec.start + spec.size].double() @ scores
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.intercept + self.scores(x).sum(dim=1, keepdim=True)).to(x.dtype)

    def terms(self, x: torch.Tensor) -> torch.Tensor:
        """Each feature's term of the log-odds (n, features), float64: its score through the
        output layer's slope (the log-odds are the bias, the intercept's term and these)."""
        return self.scores(x) * self.out.weight[0, 0]

    def numpy_terms(self, rows: np.ndarray) -> np.ndarray:
        """``terms`` of encoded numpy rows (what scoring's explanation reads)."""
        with torch.inference_mode():
            return self.terms(torch.from_numpy(rows)).numpy()

    def term_specs(self) -> list[list[Any]]:
        """The specs as an artifact's config keeps them (``from_specs`` reads them back)."""
        return [spec.as_list() for spec in self.specs]

    @classmethod
    def from_specs(cls, stored: Sequence[Sequence[Any]]) -> AdditiveNetwork:
        """An empty network shaped as ``term_specs`` said (its state loaded after)."""
        return cls([TermSpec(str(kind), int(start), int(size)) for kind, start, size in stored])


def term_specs(encoder: Encoder) -> list[TermSpec]:
    """The specs of a schema's features, before the cut counts are known (0 cuts)."""
    starts = np.concatenate([[0], np.cumsum(encoder.widths)[:-1]]).astype(int)
    return [TermSpec(TABLE, int(s), w) if f.kind is FeatureKind.CATEGORICAL
            else TermSpec(BINS, int(s), 0)
            for f, s, w in zip(encoder.schema.features, starts, encoder.widths, strict=True)]


def additive_network(encoder: Encoder, tables: ShapeTables) -> AdditiveNetwork:
    """The network of a fitted EBM's tables over ``encoder``'s inputs (module docstring)."""
    specs, cuts, scores = [], [], []
    for spec, feature, raw_cuts, table in zip(term_specs(encoder), encoder.schema.features,
                                              tables.cuts, tables.scores, strict=True):
        if spec.kind == TABLE:
            codes = np.arange(spec.size, dtype=np.float64)
            specs.append(spec)
            cuts.append(np.zeros(0))
            scores.append(table[np.searchsorted(raw_cuts, codes, side="right")])
            continue
        lower, upper = feature.model_range  # the encoder's affine map, operation for operation
        mid, half = (upper + lower) / 2.0, (upper - lower) / 2.0
        specs.append(TermSpec(BINS, spec.start, len(raw_cuts)))
        cuts.append((raw_cuts - mid) / half)
        scores.append(table)
    network = AdditiveNetwork(specs)
    state = {"intercept": torch.tensor(tables.intercept, dtype=torch.float64),
             "out.weight": torch.ones((1, 1), dtype=torch.float64),
             "out.bias": torch.zeros(1, dtype=torch.float64)}
    for j, (c, s) in enumerate(zip(cuts, scores, strict=True)):
        state[f"cuts_{j}"] = torch.from_numpy(np.ascontiguousarray(c, dtype=np.float64))
        state[f"scores_{j}"] = torch.from_numpy(np.ascontiguousarray(s, dtype=np.float64))
    network.load_state_dict(state)
    return network


class MultiRowPatients(ValueError):
    """DP-EBM's sensitivity is one row's: a patient with several rows is refused."""


@dataclass(frozen=True)
class FittedEbm:
    tables: ShapeTables
    noise: EbmNoise
    model: Any  # interpret's fitted estimator (its decision_function is the reference)


_BINNING = threading.Lock()


@contextmanager
def public_total(rows: int | None) -> Iterator[None]:
    """Make interpret's private numeric binning merge its cells at ``rows`` / max_bins, the
    part's public size, not at the number of rows it is given (private where a release leaves
    patients out, or a union's members share them): each column it bins is padded up to
    ``rows`` with values past its public range, which ``np.histogram`` counts in no cell, so the
    noisy counts are unchanged; the boosting never sees the padding."""
    if rows is None:
        yield
        return
    from interpret.utils import _preprocessor

    original = _preprocessor.private_numeric_binning

    def binning(column: np.ndarray, sample_weight: np.ndarray | None, *args: Any,
                **kwargs: Any) -> Any:
        missing = rows - len(column)
        if missing > 0 and sample_weight is None:
            column = np.concatenate([column, np.full(missing, np.inf)])
        return original(column, sample_weight, *args, **kwargs)

    with _BINNING:
        _preprocessor.private_numeric_binning = binning
        try:
            yield
        finally:
            _preprocessor.private_numeric_binning = original


ANCHORS = 2
"""Public rows added to every fit: the reference patient once with each outcome."""


def anchored(schema: DatasetSchema, raw: np.ndarray, y: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """The rows interpret is fitted on: the part's rows plus the reference patient once with
    each outcome (``ANCHORS``).

    Interpret answers a single-class ``y`` with a noiseless one-class model (intercept
    -inf) instead of its noisy fit, so whether a fit is private would depend on the rows. The
    anchors are the same two public rows for every table, so neighbouring tables still differ
    in one row and the fit always runs the mechanism the ledger charges; their pull is that of
    two rows at the public reference.
    """
    rows = interpret_rows(schema, raw)
    reference = np.array([f.reference_value for f in schema.features], dtype=np.float64)
    anchors = interpret_rows(schema, np.vstack([reference, reference]))
    return (np.vstack([rows, anchors]),
            np.concatenate([np.asarray(y).astype(int), np.array([0, 1])]))


def _classifier(schema: DatasetSchema, noise: EbmNoise, random_state: int | None) -> Any:
    """Interpret's estimator at the planned noise, bins and bounds from the declaration."""
    from interpret.privacy import DPExplainableBoostingClassifier  # loaded by a fit only

    spec, recipe = layout(schema), noise.recipe
    return DPExplainableBoostingClassifier(
        feature_names=spec.feature_names, feature_types=spec.feature_types,
        privacy_bounds=spec.privacy_bounds, epsilon=noise.library_epsilon, delta=recipe.delta,
        composition=recipe.composition, bin_budget_frac=recipe.bin_budget_frac,
        learning_rate=recipe.learning_rate, max_rounds=recipe.max_rounds,
        outer_bags=recipe.outer_bags, max_bins=recipe.max_bins, n_jobs=1,
        random_state=random_state)


def _fit(model: Any, rows: np.ndarray, outcomes: np.ndarray, public_rows: int | None) -> None:
    with warnings.catch_warnings():
        # interpret warns where it reads bounds or types off the rows: never acceptable here
        warnings.filterwarnings("error", message="Possible privacy violation")
        warnings.filterwarnings("ignore", message="Privacy violation: using a fixed")
        with public_total(public_rows):
            model.fit(rows, outcomes)


def _ballast(schema: DatasetSchema, noise: EbmNoise, rows: int) -> None:
    """Fit, and throw away, the same recipe on ``rows`` copies of the public reference
    patient (plus the anchors), so that a fit's duration follows the part's public size.

    Interpret's boosting costs about a fixed time plus a time per row read; where a release
    leaves patients out, the rows read (a private count) are fewer than the public size. The
    real fit on ``n`` rows and this one on ``public - n`` together cost about two fixed times
    and the public size's rows, whatever ``n`` is (as DP-SGD does the work of the public
    sizes). Nothing of this fit is kept or released.
    """
    reference = np.array([f.reference_value for f in schema.features], dtype=np.float64)
    raw = np.tile(reference, (rows, 1))
    rows_, outcomes = anchored(schema, raw, np.arange(rows) % 2)
    _fit(_classifier(schema, noise, None), rows_, outcomes, None)


def fit_ebm(schema: DatasetSchema, raw: np.ndarray, y: np.ndarray, noise: EbmNoise, *,
            public_rows: int | None = None, patient_ids: Sequence[str] | None = None,
            random_state: int | None = None) -> FittedEbm:
    """Fit interpret's DP-EBM on raw rows at the planned ``noise`` (``ebm_accounting.plan``),
    and check the noise it drew is the plan's (the ledger charges the plan's event).

    Args:
        public_rows: the part's public size, which the binning's merge threshold reads
            (``public_total``) and whose work a fit does (``_ballast``); None: the rows
            given (a public table).
        patient_ids: the rows' patients, when known: every one must be distinct (the service
            keeps one row per patient; this refuses rather than assumes).
        random_state: tests only (interpret warns: fixed noise is no privacy).

    Raises:
        MultiRowPatients: a patient id repeats.
        NoiseMismatch: interpret drew other noise than planned.
        UnexpectedModel: interpret fitted something else (e.g. one outcome class only).
    """
    if patient_ids is not None and len(set(patient_ids)) != len(patient_ids):
        raise MultiRowPatients("a patient has several rows: DP-EBM protects one row each")
    recipe = noise.recipe
    if recipe.n_features != len(schema.features):
        raise ValueError("the recipe's feature count is not the schema's")
    model = _classifier(schema, noise, random_state)
    rows, outcomes = anchored(schema, raw, y)
    _fit(model, rows, outcomes, None if public_rows is None else public_rows + ANCHORS)
    noise.check(binning=float(model.noise_scale_binning_),
                boosting=float(model.noise_scale_boosting_))
    if public_rows is not None:
        _ballast(schema, noise, max(public_rows - len(raw), 0))
    return FittedEbm(shape_tables(model, len(schema.features)), noise, model)
