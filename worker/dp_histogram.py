"""The evaluation's one DP release: noisy counts of score bin x outcome, overall and per subgroup.

Why: held-out metrics computed exactly on private rows change deterministically when one patient
is removed (infinite epsilon). Here every metric is a function of these noisy counts alone, so the
evaluation is one Gaussian mechanism and everything shown is post-processing of it.

- Bins are fixed and public: probability edges from 0.25% up, about 1.5x apart where a rare
  outcome's scores live, a few above 50%, and always the band cut-offs, so the band metrics are
  exact functions of the bins. Never taken from the data.
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

GRID = (0.0025, 0.005, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.5, 0.7, 0.9)
"""Public inner bin edges (probabilities) before the band cut-offs are added."""
NEGATIVE, POSITIVE = 0, 1
"""Index of the outcome on a histogram's last axis."""


def bin_edges(thresholds: Mapping[str, float]) -> np.ndarray:
    """Inner edges: the public grid and the two band cut-offs, sorted, without duplicates."""
    return np.unique(np.concatenate([np.asarray(GRID), np.asarray(cut_offs(thresholds))]))


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

    @property
    def n_bins(self) -> int:
        return len(self.edges) + 1

    @property
    def l2_sensitivity(self) -> float:
        """One record: one cell of each histogram, each by 1."""
        return math.sqrt(1 + len(self.groups))

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
) -> Release:
    """Count the rows per cell of every histogram and add Gaussian noise to every cell.

    Args:
        y: (n,) 0/1 integer outcomes.
        probability: (n,) probabilities in [0, 1].
        groups: grouping -> ((n,) integer codes in [0, len(labels)), labels); checked by the caller.
        noise_multiplier: noise std over the L2 sensitivity; 0 releases exact counts.
        thresholds: the band cut-offs, made bin edges.
        rng: the noise's generator (fresh OS entropy in the worker).
    """
    edges = bin_edges(thresholds)
    n_bins = len(edges) + 1
    bins = bin_of(probability, edges)
    exact = {"": histogram(bins, y, n_bins)[0]}
    for name, (codes, labels) in groups.items():
        exact[name] = histogram(bins, y, n_bins, codes, len(labels))
    std = noise_multiplier * math.sqrt(1 + len(groups))
    noisy = {name: counts + rng.normal(0.0, std, counts.shape) if std > 0 else counts
             for name, counts in exact.items()}
    return Release(
        edges=edges, overall=noisy.pop(""), groups=noisy,
        labels={name: [str(label) for label in labels] for name, (_, labels) in groups.items()},
        noise_multiplier=float(noise_multiplier),
    )
