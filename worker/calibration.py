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
COARSE_METHOD = "dp-platt-binned-coarse-v1"
COARSE_EDGES = np.array([-3.0, -1.5, 0.0, 1.5, 3.0])
COARSE_SLOPE_SD = 0.3
COARSE_BELOW = 2.0
"""The coarse release (issue 31), for calibration parts from the size floor up to COARSE_BELOW
times it: 6 public logit bins instead of 24, so each bin's counts stand further above the
noise, and a looser prior on the slope (sd 0.3 against 0.1), so the fit can shrink an
over-confident model's logits toward the base rate. Just above the floor the fine release's
bins hold a few noisy rows each and its prior keeps the slope near 1: on bench/proxy_study.py's
800-row, 15% proxy (about 135 calibration rows, 1.3 times the floor at epsilon 1) its log-loss
was 0.377 with the fine release and 0.369 with the coarse one (base rate 0.395; 5 splits,
paired), and on the full-batch models of that table 0.420 fine, 0.418 coarse with sd 0.1,
0.396 coarse with sd 0.3. Below the floor nothing is released still: a first version
released the coarse bins down to their own, half as large, floor, and on a real table of the
confirmation set (anes96, 140 calibration rows at epsilon 0.5) five runs of one job spread
over 0.51 in log-loss, and the mean was 0.343 against 0.266 for the uncalibrated tutorial
model."""


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
    logits: np.ndarray, y: np.ndarray, noise_multiplier: float, rng: np.random.Generator,
    edges: np.ndarray = EDGES,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin (rows, positives) with Gaussian noise of std ``noise_multiplier * sqrt(2)``."""
    bins = np.searchsorted(edges, logits, side="right")
    counts = np.bincount(bins, minlength=len(edges) + 1).astype(float)
    positives = np.bincount(bins, weights=y, minlength=len(edges) + 1).astype(float)
    if noise_multiplier > 0:
        std = noise_multiplier * SENSITIVITY
        counts = counts + rng.normal(0.0, std, counts.shape)
        positives = positives + rng.normal(0.0, std, positives.shape)
    return counts, positives


def _bin_logits(edges: np.ndarray = EDGES) -> np.ndarray:
    """A representative logit per bin: the centre of inner bins, half the next bin's width
    beyond the ends."""
    centres = 0.5 * (edges[:-1] + edges[1:])
    low, high = float(edges[1] - edges[0]), float(edges[-1] - edges[-2])
    return np.concatenate([[edges[0] - low / 2], centres, [edges[-1] + high / 2]])


def fit_platt(
    counts: np.ndarray, positives: np.ndarray, *, min_count: float = 0.0,
    edges: np.ndarray = EDGES, slope_sd: float = PRIOR_SLOPE_SD,
) -> tuple[float, float]:
    """MAP (slope, intercept) of logit' = slope * logit + intercept on (noisy) binned counts.

    Bins whose noisy count is below ``min_count`` are left out and negative noisy counts are
    clamped (post-processing). The objective (binomial log-likelihood plus the Gaussian prior)
    is concave: damped Newton steps converge.
    """
    n = np.where(counts >= min_count, np.clip(counts, 0.0, None), 0.0)
    k = np.clip(positives, 0.0, n)
    design = np.column_stack([_bin_logits(edges), np.ones(len(n))])
    prior_mean = np.array([PRIOR_SLOPE, PRIOR_INTERCEPT])
    prior_precision = np.diag([slope_sd**-2, PRIOR_INTERCEPT_SD**-2])

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


def binned_log_loss(counts: np.ndarray, positives: np.ndarray, slope: float, intercept: float,
                    *, min_count: float = 0.0) -> float:
    """The log-loss of the map logit' = slope * logit + intercept on (noisy) binned counts, at
    each bin's representative logit, over the bins ``fit_platt`` uses: post-processing of the
    release (inf when no bin counts)."""
    n = np.where(counts >= min_count, np.clip(counts, 0.0, None), 0.0)
    k = np.clip(positives, 0.0, n)
    eta = slope * _bin_logits() + intercept
    total = float(np.sum(n))
    if total <= 0.0:
        return math.inf
    return float(np.sum(k * np.logaddexp(0.0, -eta) + (n - k) * np.logaddexp(0.0, eta))) / total


def calibrate(
    logits: np.ndarray, y: np.ndarray, noise_multiplier: float, rng: np.random.Generator,
    *, coarse: bool = False,
) -> Calibration:
    """Release the noisy binned counts of the calibration rows and fit Platt's map to them
    (``coarse``: on COARSE_EDGES' 6 bins with the looser COARSE_SLOPE_SD)."""
    edges = COARSE_EDGES if coarse else EDGES
    counts, positives = release_counts(logits, y, noise_multiplier, rng, edges)
    min_count = NOISE_FLOOR * noise_multiplier * SENSITIVITY
    slope, intercept = fit_platt(counts, positives, min_count=min_count, edges=edges,
                                 slope_sd=COARSE_SLOPE_SD if coarse else PRIOR_SLOPE_SD)
    return Calibration(
        method=COARSE_METHOD if coarse else METHOD, rows=int(len(y)),
        noise_multiplier=float(noise_multiplier),
        slope=slope, intercept=intercept, bin_edges_logit=[float(e) for e in edges],
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
    coarse: bool = False,
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
    calibration = calibrate(log_odds, y_holdout, noise, generator, coarse=coarse)
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
    rng: np.random.Generator | None = None,
) -> Calibration:
    """``calibrate_model`` when the calibration part meets its size floor at this noise (the
    coarse release, 6 bins, below COARSE_BELOW times the floor); else no release at all
    (``withheld``): below the floor the DP fit is the noise's and the prior's, and it hurt the
    log-loss more often than it helped (``bench/calibration_floor.py``). The floor reads public
    quantities only (the part's row count and the noise), so the choice releases nothing
    either. ``rng``: as ``calibrate_model``'s (a seeded one for benches on
    public tables only)."""
    rows, floor = len(y_holdout), size_floor_rows(noise_multiplier)
    if rows < floor:
        return withheld(rows, noise_multiplier)
    return calibrate_model(network, x_holdout, y_holdout, history=history, delta=delta,
                           training_epsilon=training_epsilon, encoder=encoder,
                           noise_multiplier=noise_multiplier, rng=rng,
                           coarse=rows < COARSE_BELOW * floor)
