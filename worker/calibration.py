"""Differentially private Platt scaling on the calibration rows, free by parallel composition.

Why: DP-SGD with per-sample clipping under-weights the rare positives (their gradients are the
ones clipped), so a DP model's probabilities run about 3x too low at 2% prevalence while its
ranking is fine. Risk bands are thresholds on probability, so the probability must be right.

How:
- The calibration rows are a per-record random part of the dataset, disjoint from the training
  rows (``app.datasets.synthetic.split_rows``). A record is in exactly one part, so the two
  mechanisms compose in parallel: the job's guarantee is the larger of the two, not the sum.
- One Gaussian mechanism releases, per bin of the trained model's logit (fixed, public edges), the
  number of calibration rows and of positives. Adding or removing a record changes one count and
  at most one positive count by 1: L2 sensitivity sqrt(2).
- Its noise (``app.privacy.parallel.dominated_gaussian_noise``) makes it no costlier than the
  training it follows, at every RDP order and at the job's delta: the job's ledger charge
  covers the calibration unchanged.
- Platt's two parameters are then fitted to the noisy counts (post-processing) with a weak public
  prior (slope near 1, intercept near 0) that matters only when the counts are very noisy; bins
  whose noisy count is within the noise of zero are left out of the fit.
- The edges are symmetric in log-odds (0.25% .. 99.75%, and out to log-odds 12), so a common
  outcome (30-40%) is calibrated as well as a rare one (v1 stopped at 32%).
- The fitted map is folded into the model's last linear layer, so every consumer of the model
  (scoring, Shapley contributions, FHIR, CDS Hooks) sees calibrated probabilities.
"""

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from app.datasets.encoding import CRISIS_ENCODER, Encoder
from app.jobs import size_floor
from app.privacy.accounting import Mechanism
from app.privacy.parallel import dominated_gaussian_noise
from worker.training import predict_log_odds

METHOD = "dp-platt-binned-v2"
# Logit bin edges, public and fixed, never taken from the data. v1 had probabilities 0.25% ..
# 32% doubling (where a rare outcome's scores live) and one open bin above: at a 30-40% outcome
# most rows fell in that bin, whose one representative logit bent the fit (measured on public
# tables, bench/proxy_study.py: log-loss worse after calibration than before). v2 is symmetric
# in log-odds: the same edges for the rare outcome, mirrored for the common one (0.25% .. 50%
# .. 99.75%), and, for confident models (well separated data), edges at log-odds 8, 10 and 12
# on both sides, so the open outer bins start where a probability is within 6e-6 of 0 or 1.
RARE_EDGE_PROBABILITIES = (0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32)
FAR_EDGES = (8.0, 10.0, 12.0)
_RARE = np.log(np.array(RARE_EDGE_PROBABILITIES) / (1.0 - np.array(RARE_EDGE_PROBABILITIES)))
EDGES = np.sort(np.concatenate([-np.array(FAR_EDGES), _RARE, [0.0], -_RARE[::-1],
                                np.array(FAR_EDGES)]))
SENSITIVITY = math.sqrt(2.0)
# Public prior (Gaussian) on the Platt parameters. Clipping mostly shifts a DP model's intercept
# (measured: slope 0.9-1.0, intercept about -1 log-odds at 2% prevalence with clip 0.5), and a
# few dozen noisy positives cannot pin a slope down, so the slope is held near 1. Chosen on the
# public proxy generator (bench/utility.py prints ECE before and after); the intercept's sd
# went from 3 to 1 with the clip rule of app/jobs/recipe.py (bench/proxy_study.py): a default
# clip now leaves the model close to calibrated, and on a small calibration part (85 rows of
# a 569-row table) the looser prior let the noise move the intercept by 2 log-odds, tripling
# the log-loss, while on the 2% generator either sd gives the same log-loss within 0.2%.
PRIOR_SLOPE, PRIOR_SLOPE_SD = 1.0, 0.1
PRIOR_INTERCEPT, PRIOR_INTERCEPT_SD = 0.0, 1.0
NOISE_FLOOR = 2.0
"""A bin enters the fit only when its noisy count is at least this many noise stds: an empty
bin's noise, clamped at 0, would otherwise add phantom rows (half of them positive) where the
model puts nobody. v2 has 24 bins, most of them empty at any one prevalence; without this the
fit on a 2% outcome came out worse than no calibration (bench/proxy_study.py)."""
MIN_SLOPE = 0.05  # keeps the map increasing: calibration never changes the ranking (AUC)


@dataclass(frozen=True)
class Calibration:
    """What was released and fitted; stored with the model and shown in its reports."""

    method: str
    rows: int
    noise_multiplier: float  # noise std / L2 sensitivity of the released counts; 0: exact
    slope: float
    intercept: float
    bin_edges_logit: list[float]
    noisy_counts: list[float]  # released (DP) statistics; safe to show
    noisy_positives: list[float]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def release_counts(
    logits: np.ndarray, y: np.ndarray, noise_multiplier: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin (rows, positives) with Gaussian noise of std ``noise_multiplier * sqrt(2)``."""
    bins = np.searchsorted(EDGES, logits, side="right")
    counts = np.bincount(bins, minlength=len(EDGES) + 1).astype(float)
    positives = np.bincount(bins, weights=y, minlength=len(EDGES) + 1).astype(float)
    if noise_multiplier > 0:
        std = noise_multiplier * SENSITIVITY
        counts = counts + rng.normal(0.0, std, counts.shape)
        positives = positives + rng.normal(0.0, std, positives.shape)
    return counts, positives


def _bin_logits() -> np.ndarray:
    """A representative logit per bin: the centre of inner bins, half the next bin's width
    beyond the ends."""
    centres = 0.5 * (EDGES[:-1] + EDGES[1:])
    low, high = float(EDGES[1] - EDGES[0]), float(EDGES[-1] - EDGES[-2])
    return np.concatenate([[EDGES[0] - low / 2], centres, [EDGES[-1] + high / 2]])


def fit_platt(
    counts: np.ndarray, positives: np.ndarray, *, min_count: float = 0.0
) -> tuple[float, float]:
    """MAP (slope, intercept) of logit' = slope * logit + intercept on (noisy) binned counts.

    Bins whose noisy count is below ``min_count`` are left out and negative noisy counts are
    clamped (post-processing). The objective (binomial log-likelihood plus the Gaussian prior)
    is concave: damped Newton steps converge.
    """
    n = np.where(counts >= min_count, np.clip(counts, 0.0, None), 0.0)
    k = np.clip(positives, 0.0, n)
    design = np.column_stack([_bin_logits(), np.ones(len(n))])
    prior_mean = np.array([PRIOR_SLOPE, PRIOR_INTERCEPT])
    prior_precision = np.diag([PRIOR_SLOPE_SD**-2, PRIOR_INTERCEPT_SD**-2])

    def objective(theta: np.ndarray) -> float:
        eta = design @ theta
        loglik = k * -np.logaddexp(0.0, -eta) + (n - k) * -np.logaddexp(0.0, eta)
        d = theta - prior_mean
        return float(np.sum(loglik) - 0.5 * d @ prior_precision @ d)

    theta = prior_mean.copy()
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh(0.5 * (design @ theta)))
        gradient = design.T @ (k - n * p) - prior_precision @ (theta - prior_mean)
        hessian = design.T @ (design * (n * p * (1 - p))[:, None]) + prior_precision
        step = np.linalg.solve(hessian, gradient)
        scale, current = 1.0, objective(theta)
        while objective(theta + scale * step) < current and scale > 1e-6:
            scale /= 2.0
        theta = theta + scale * step
        if float(np.max(np.abs(scale * step))) < 1e-10:
            break
    return max(float(theta[0]), MIN_SLOPE), float(theta[1])


def calibrate(
    logits: np.ndarray, y: np.ndarray, noise_multiplier: float, rng: np.random.Generator
) -> Calibration:
    """Release the noisy binned counts of the calibration rows and fit Platt's map to them."""
    counts, positives = release_counts(logits, y, noise_multiplier, rng)
    min_count = NOISE_FLOOR * noise_multiplier * SENSITIVITY
    slope, intercept = fit_platt(counts, positives, min_count=min_count)
    return Calibration(
        method=METHOD, rows=int(len(y)), noise_multiplier=float(noise_multiplier),
        slope=slope, intercept=intercept, bin_edges_logit=[float(e) for e in EDGES],
        noisy_counts=[float(c) for c in counts], noisy_positives=[float(p) for p in positives],
    )


def fold_into(network: nn.Module, calibration: Calibration) -> None:
    """Apply logit' = slope * logit + intercept inside the model's last linear layer."""
    last = [m for m in network.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        last.weight.mul_(calibration.slope)
        last.bias.mul_(calibration.slope).add_(calibration.intercept)


def calibrate_model(
    network: nn.Module,
    x_holdout: np.ndarray,
    y_holdout: np.ndarray,
    *,
    history: list[Mechanism],
    delta: float,
    training_epsilon: float,
    rng: np.random.Generator | None = None,
    encoder: Encoder = CRISIS_ENCODER,
    noise_multiplier: float | None = None,
) -> Calibration:
    """Calibrate ``network`` in place on the held-out rows at no extra privacy cost.

    ``rng`` defaults to fresh OS entropy: the noise must not be reproducible from anything a
    caller knows (a seeded generator would let them subtract it). ``noise_multiplier``: the
    held-out noise when the caller matched it already (``parallel.held_out_noise``, at the
    job's and the budget's delta); otherwise matched to the training at ``delta``.
    """
    noise = (noise_multiplier if noise_multiplier is not None
             else dominated_gaussian_noise(history, delta, training_epsilon))
    generator = rng if rng is not None else np.random.default_rng()
    log_odds = predict_log_odds(network, x_holdout, encoder)
    calibration = calibrate(log_odds, y_holdout, noise, generator)
    fold_into(network, calibration)
    return calibration


def size_floor_rows(noise_multiplier: float) -> int:
    """The calibration rows a meaningful release needs at this noise (``app.jobs.size_floor``:
    the rarer outcome, at most half the rows, summed over the 24 bins, at least NOISE_FLOOR
    noise stds)."""
    return size_floor.calibration_floor(noise_multiplier=noise_multiplier, bins=len(EDGES) + 1)


def withheld(rows: int, noise_multiplier: float) -> Calibration:
    """The record of a calibration not released: nothing counted, nothing fitted, the model's
    own probabilities kept (the identity map)."""
    return Calibration(
        method=size_floor.CALIBRATION_WITHHELD, rows=int(rows),
        noise_multiplier=float(noise_multiplier), slope=1.0, intercept=0.0,
        bin_edges_logit=[float(e) for e in EDGES], noisy_counts=[], noisy_positives=[],
    )


def calibrate_if_meaningful(
    network: nn.Module,
    x_holdout: np.ndarray,
    y_holdout: np.ndarray,
    *,
    history: list[Mechanism],
    delta: float,
    training_epsilon: float,
    noise_multiplier: float,
    encoder: Encoder = CRISIS_ENCODER,
) -> Calibration:
    """``calibrate_model`` when the calibration part meets its size floor at this noise; else
    no release at all (``withheld``): below the floor the DP fit is the noise's and the prior's,
    and it hurt the log-loss more often than it helped (``bench/calibration_floor.py``). The
    floor reads public quantities only (the part's row count and the noise), so the choice
    releases nothing either."""
    if len(y_holdout) < size_floor_rows(noise_multiplier):
        return withheld(len(y_holdout), noise_multiplier)
    return calibrate_model(network, x_holdout, y_holdout, history=history, delta=delta,
                           training_epsilon=training_epsilon, encoder=encoder,
                           noise_multiplier=noise_multiplier)
