"""The evaluation's one DP release: noisy counts of score bin x outcome, overall and per subgroup.

Why: held-out metrics computed exactly on private rows change deterministically when one patient
is removed (infinite epsilon). Here every metric is a function of these noisy counts alone, so the
evaluation is one Gaussian mechanism and everything shown is post-processing of it.

- Bins are public: a function of the model's declared band cut-offs alone (``bin_edges``), never
  of the data, so they are the same for every histogram and every dataset declaring those bands.
  The edges are evenly spaced in log-odds, at most ``STEP_LOG_ODDS`` apart, from
  ``BELOW_LOG_ODDS`` below the low/medium cut-off to ``ABOVE_LOG_ODDS`` above the medium/high one,
  and the cut-offs are edges, so the band metrics are exact functions of the bins. The outcome's
  bands say where its risk is discriminated, so the bins follow the outcome at any prevalence: a
  calibrated model's scores cluster there, and the two open end bins take the tails.
- Histograms: one of (bin, outcome) for the whole evaluation part, and one of (group, bin, outcome)
  per grouping (age band, sex, ...). Group labels come from the schema, so an empty group is still
  a row of zeros (plus noise) and its existence reveals nothing.
- Adding or removing one record changes one cell of each histogram by 1: L2 sensitivity
  sqrt(1 + number of groupings). Every cell gets Gaussian noise of std noise_multiplier times that.

Noise source: ``numpy.random.Generator.normal`` on floats, the generator being the caller's (the
worker seeds it from OS entropy, so no caller can reproduce and subtract the noise). Not OpenDP:
it is not among the service's dependencies, and ``worker.calibration`` releases its counts the same
way. Known caveat: floating-point Gaussian samplers are not exact (precision attacks, Jin et al.
2022); a discrete Gaussian on the integer counts from a CSPRNG (OpenDP ``make_gaussian``) would
remove it without changing the accounting (for integer shifts its RDP is at most the continuous
one's: Canonne, Kamath, Steinke 2020).
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.bands import cut_offs

STEP_LOG_ODDS = 0.35
"""Widest bin between the outer edges (log-odds). Ties within a bin cost ROC-AUC roughly in
proportion to the squared width over the spread of the scores; at 0.35 a weak calibrated model
(log-odds spread 0.5, AUC about 0.63) loses under 0.005 to binning alone. Narrower steps mean
more cells: more noise summed, and a higher noise floor below which ROC-AUC is withheld."""
BELOW_LOG_ODDS, ABOVE_LOG_ODDS = 1.25, 2.5
"""How far the edges reach below the low/medium cut-off and above the medium/high one (log-odds).
Not further: under noise, a bin that holds almost no rows of a class is where the non-negative
projection (``worker.histogram_metrics``) leaves noise as counts, which pulls ranking metrics
towards chance, while lumping a tail into an end bin costs little (few pairs of a positive
and a negative fall in it together). Further above than below: a rare outcome's positives, the
class the noise hurts most, lie mostly above its low cut-off. Measured by
bench/evaluation_auc.py on public tables of 2% to 70% prevalence."""
MAX_STEPS = 30
"""Steps between the outer edges at most (plus one per stretch from rounding up): bands
declared far apart get wider steps rather than ever more noisy cells."""
NEGATIVE, POSITIVE = 0, 1
"""Index of the outcome on a histogram's last axis."""


def _log_odds(probability: float) -> float:
    return math.log(probability) - math.log1p(-probability)


def bin_edges(thresholds: Mapping[str, float]) -> np.ndarray:
    """Inner edges (increasing probabilities in (0, 1)) from the band cut-offs alone.

    Three stretches of log-odds, each split into equal steps of at most ``STEP_LOG_ODDS``: from
    ``BELOW_LOG_ODDS`` under the low/medium cut-off to it, from it to the medium/high cut-off, and
    from there to ``ABOVE_LOG_ODDS`` over it. The cut-offs themselves are edges, exactly.

    Args:
        thresholds: {"low_medium", "medium_high"}, 0 < low_medium < medium_high < 1 (public).
    """
    low, high = cut_offs(thresholds)
    knots = (_log_odds(low) - BELOW_LOG_ODDS, _log_odds(low), _log_odds(high),
             _log_odds(high) + ABOVE_LOG_ODDS)
    step = max(STEP_LOG_ODDS, (knots[-1] - knots[0]) / MAX_STEPS)
    stretches = [np.linspace(a, b, max(1, math.ceil((b - a) / step - 1e-9)) + 1)[:-1]
                 for a, b in zip(knots[:-1], knots[1:], strict=True)]
    edges = np.exp(-np.logaddexp(0.0, -np.concatenate([*stretches, knots[-1:]])))  # sigmoid
    edges[len(stretches[0])] = low  # exactly the declared cut-offs, not their round trip
    edges[len(stretches[0]) + len(stretches[1])] = high
    return edges


def all_edges(edges: np.ndarray) -> np.ndarray:
    """0, the inner edges, 1: bin b is [all_edges[b], all_edges[b + 1]) (the last includes 1)."""
    return np.concatenate([[0.0], edges, [1.0]])


def bin_of(probability: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Each probability's bin; one equal to an edge belongs to the bin above, as with bands."""
    return np.searchsorted(edges, probability, side="right")


@dataclass(frozen=True)
class Release:
    """What the mechanism released (noisy, unclamped) and its public parameters."""

    edges: np.ndarray  # inner bin edges
    overall: np.ndarray  # (n_bins, 2) noisy counts: [..., NEGATIVE], [..., POSITIVE]
    groups: dict[str, np.ndarray]  # grouping -> (n_groups, n_bins, 2) noisy counts
    labels: dict[str, list[str]]  # grouping -> its public group labels
    noise_multiplier: float  # noise std / L2 sensitivity; 0: exact counts (public data)
    other_histograms: int = 0  # released with these under the same noise (a monitoring run's)
    public_rows: int | None = None
    """The counted part's public size (row counts are public by convention), or None where no
    public count is known. The histograms may hold fewer rows, when the release left patients
    out: how many is private, so nothing reads it from the counts' length."""

    @property
    def n_bins(self) -> int:
        return len(self.edges) + 1

    @property
    def l2_sensitivity(self) -> float:
        """One record: one cell of each histogram, each by 1."""
        return math.sqrt(1 + len(self.groups) + self.other_histograms)

    @property
    def noise_std(self) -> float:
        return self.noise_multiplier * self.l2_sensitivity


def histogram(bins: np.ndarray, y: np.ndarray, n_bins: int, codes: np.ndarray | None = None,
              n_groups: int = 1) -> np.ndarray:
    """Exact (n_groups, n_bins, 2) counts; ``codes`` None puts every row in group 0."""
    group = np.zeros(len(bins), dtype=np.int64) if codes is None else codes
    cell = (group * n_bins + bins) * 2 + y
    counts = np.bincount(cell, minlength=n_groups * n_bins * 2)
    return counts.reshape(n_groups, n_bins, 2).astype(np.float64)


def release(
    y: np.ndarray,
    probability: np.ndarray,
    groups: Mapping[str, tuple[np.ndarray, Sequence[str]]],
    *,
    noise_multiplier: float,
    thresholds: Mapping[str, float],
    rng: np.random.Generator,
    public_rows: int | None = None,
) -> Release:
    """Count the rows per cell of every histogram and add Gaussian noise to every cell.

    Args:
        y: (n,) 0/1 integer outcomes.
        probability: (n,) probabilities in [0, 1].
        groups: grouping -> ((n,) integer codes in [0, len(labels)), labels); checked by the caller.
        noise_multiplier: noise std over the L2 sensitivity; 0 releases exact counts.
        thresholds: the band cut-offs; the bins are placed around them (``bin_edges``).
        rng: the noise's generator (fresh OS entropy in the worker).
        public_rows: the part's public size (``Release.public_rows``); None: not known.
    """
    return histogram_release(y, probability, groups, edges=bin_edges(thresholds),
                             noise_multiplier=noise_multiplier, rng=rng,
                             public_rows=public_rows)


def histogram_release(
    y: np.ndarray,
    probability: np.ndarray,
    groups: Mapping[str, tuple[np.ndarray, Sequence[str]]],
    *,
    edges: np.ndarray,
    noise_multiplier: float,
    rng: np.random.Generator,
    other_histograms: int = 0,
    public_rows: int | None = None,
) -> Release:
    """``release`` on given bins: every histogram's cells counted and noised, the overall one
    first, then each grouping's, with noise of std ``noise_multiplier * sqrt(1 + groupings +
    other_histograms)`` (histograms released beside these under the same noise: a monitoring
    run's features, a comparison's other model). ``public_rows``: ``Release.public_rows``."""
    n_bins = len(edges) + 1
    bins = bin_of(probability, edges)
    exact = {"": histogram(bins, y, n_bins)[0]}
    for name, (codes, labels) in groups.items():
        exact[name] = histogram(bins, y, n_bins, codes, len(labels))
    std = noise_multiplier * math.sqrt(1 + len(groups) + other_histograms)
    noisy = {name: counts + rng.normal(0.0, std, counts.shape) if std > 0 else counts
             for name, counts in exact.items()}
    return Release(
        edges=edges, overall=noisy.pop(""), groups=noisy,
        labels={name: [str(label) for label in labels] for name, (_, labels) in groups.items()},
        noise_multiplier=float(noise_multiplier), other_histograms=other_histograms,
        public_rows=public_rows,
    )
