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
- Platt's two parameters are then fitted to the noisy counts (post-processing) under the
  release's own likelihood: each bin's true counts are unknown, the release is them plus
  Gaussian noise of a known std, so the fit sums over the counts the noise could hide
  (``worker.platt_fit``): noisy counts read as counts, clamped, would turn the noise in a
  confident model's outer bins into rows of the other outcome and pull its slope far down. A
  public prior read from the training's plan (``prior_for``) matters only when the counts are
  very noisy; each bin's probability is the map's mean over where its rows lie (``bin_points``).
- The edges are symmetric in log-odds, 1.5 apart, with open bins beyond log-odds 8: a common
  outcome (30-40%) is calibrated as well as a rare one, and 12 bins keep each bin's counts well
  above the noise on a few hundred calibration rows.
- The fitted map is folded into the model's last linear layer, so every consumer of the model
  (scoring, Shapley contributions, FHIR, CDS Hooks) sees calibrated probabilities.

docs/decisions/0009-calibration-fit-through-the-noise.md records why the fit is built this way.
"""

import math
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from torch import nn

from app.datasets.schema.encoding import BUILT_IN_ENCODER, Encoder
from app.jobs import size_floor
from app.privacy.accounting import History, Mechanism
from app.privacy.parallel import dominated_gaussian_noise
from worker.platt_fit import fit_deconvolved
from worker.training import predict_log_odds

METHOD = "dp-platt-binned-v3"
EDGES = np.array([-8.0, -6.0, -4.5, -3.0, -1.5, 0.0, 1.5, 3.0, 4.5, 6.0, 8.0])
"""Logit bin edges, public and fixed, never taken from the data: 12 bins, symmetric in
log-odds, 1.5 apart from probability 1.1% to 98.9%, then 6 and 8 (0.25% and 0.03%) for rare
outcomes and confident models. Symmetric, so a common outcome gets as many bins as a rare one;
few, so each bin's counts, which carry the noise of a whole count each, stand above it
(bench/calibration_fits.py compares fits on the same models and noise draws)."""
SENSITIVITY = math.sqrt(2.0)
FLOOR_BINS = 24
"""The bins the size floor is computed for (``size_floor_rows``): 24, twice the fine release's
12, so that which parts are calibrated, and which jobs get the capped regime's recipe
(``app.jobs.recipe.CALIBRATION_BINS``), stay where they were chosen; a floor for 12 bins would
be about 1.4 times lower."""
# Public prior (Gaussian) on the Platt parameters, read from the training's plan (``prior_for``),
# never from the rows. Clipping mostly shifts a DP model's intercept; an sd of 1 keeps a small
# calibration part's noise from moving it by log-odds. A noisy full-batch model comes out
# over-confident (the DP noise adds to its logits), so its slope's prior is centred at 0.75; an
# sd of 0.3 still lets the fit bring a 3 times over-confident model below the base rate's
# log-loss (tests/worker/test_calibration_coarse.py). A noisy mini-batch model (the capped
# regime's tutorial recipe: last iterate, no momentum) needs the least correction, and on a
# small part the release's noise, not the model, would move a loose prior's fit: its prior is
# the identity map held tight (MINI_BATCH_PRIOR; the slope's sd is what matters there). Chosen
# on the proxy set with bench/calibration_fits.py.
PRIOR_SLOPE, PRIOR_SLOPE_SD = 1.0, 0.3
FULL_BATCH_PRIOR_SLOPE = 0.75
PRIOR_INTERCEPT, PRIOR_INTERCEPT_SD = 0.0, 1.0


@dataclass(frozen=True)
class Prior:
    """The public Gaussian prior on Platt's (slope, intercept): read from the training's plan
    (``prior_for``), never from the rows."""

    slope_mean: float = PRIOR_SLOPE
    slope_sd: float = PRIOR_SLOPE_SD
    intercept_sd: float = PRIOR_INTERCEPT_SD


DEFAULT_PRIOR = Prior()
FULL_BATCH_PRIOR = Prior(slope_mean=FULL_BATCH_PRIOR_SLOPE)
MINI_BATCH_PRIOR = Prior(slope_sd=0.2, intercept_sd=0.2)
NOISE_FLOOR = 2.0
"""Noise stds a bin's noisy count must reach for ``binned_log_loss`` (a search's score) to
count it (the size floor's factor too). The fit itself leaves no bin out: a bin the noise
swamps is nearly flat in its likelihood (``worker.platt_fit``)."""
COARSE_METHOD = "dp-platt-binned-coarse-v2"
COARSE_EDGES = np.array([-3.0, -1.5, 0.0, 1.5, 3.0])
COARSE_BELOW = 2.0
"""The coarse release, for calibration parts from the size floor up to COARSE_BELOW times it:
6 public logit bins, so each bin's counts stand further above the noise; on the small proxy
tables the 6 bins fit better than the fine release's 12 (bench/calibration_fits.py). Below the
floor nothing is released, but for a noisy mini-batch model from MINI_BATCH_FLOOR_SHARE of it:
under a loose prior, a release below the floor spread one job's log-loss widely from run to
run."""


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


def bin_logits(edges: np.ndarray = EDGES) -> np.ndarray:
    """A representative logit per bin: the centre of inner bins, half the next bin's width
    beyond the ends."""
    centres = 0.5 * (edges[:-1] + edges[1:])
    low, high = float(edges[1] - edges[0]), float(edges[-1] - edges[-2])
    return np.concatenate([[edges[0] - low / 2], centres, [edges[-1] + high / 2]])


_GAUSS_NODES, _GAUSS_WEIGHTS = np.polynomial.legendre.leggauss(4)


def bin_points(edges: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each bin's rows lie, for the fit to average the map over (post-processing of the
    released ``counts``): in an inner bin, 4 Gauss-Legendre points weighted by a density
    tilted as the neighbouring bins' counts fall or rise (in the tail of the logits'
    distribution a 1.5-wide bin's rows crowd toward its inner edge; its centre alone
    attenuated the fitted slope by 13% on exact counts of a 2% outcome); an open outer bin
    at its representative logit."""
    logits = bin_logits(edges)
    log_counts = np.log(np.clip(np.asarray(counts, float), 1.0, None))
    half = 0.5 * np.diff(edges)  # inner bin i (1 .. len(edges) - 1) spans edges[i-1 : i+1]
    tilt = (log_counts[2:] - log_counts[:-2]) / (logits[2:] - logits[:-2])
    tilt = np.clip(tilt, -3.0 / half, 3.0 / half)  # at most 3 e-folds across half a bin
    nodes = np.repeat(logits[:, None], len(_GAUSS_NODES), axis=1)
    weights = np.zeros_like(nodes)
    weights[[0, -1], 0] = 1.0
    offsets = half[:, None] * _GAUSS_NODES[None, :]
    nodes[1:-1] = logits[1:-1, None] + offsets
    density = _GAUSS_WEIGHTS[None, :] * np.exp(tilt[:, None] * offsets)
    weights[1:-1] = density / density.sum(axis=1, keepdims=True)
    return nodes, weights


def fit_platt(counts: np.ndarray, positives: np.ndarray, *, noise_std: float,
              edges: np.ndarray = EDGES, prior: Prior = DEFAULT_PRIOR) -> tuple[float, float]:
    """MAP (slope, intercept) of logit' = slope * logit + intercept on counts released with
    Gaussian noise of std ``noise_std``, under the release's own likelihood
    (``worker.platt_fit``) and the public ``prior``."""
    nodes, weights = bin_points(edges, counts)
    return fit_deconvolved(counts, positives, noise_std=noise_std, nodes=nodes, weights=weights,
                           prior_mean=(prior.slope_mean, PRIOR_INTERCEPT),
                           prior_sd=(prior.slope_sd, prior.intercept_sd))


def binned_log_loss(counts: np.ndarray, positives: np.ndarray, slope: float, intercept: float,
                    *, min_count: float = 0.0) -> float:
    """The log-loss of the map logit' = slope * logit + intercept on (noisy) binned counts, at
    each bin's representative logit, over the bins ``fit_platt`` uses: post-processing of the
    release (inf when no bin counts)."""
    n = np.where(counts >= min_count, np.clip(counts, 0.0, None), 0.0)
    k = np.clip(positives, 0.0, n)
    eta = slope * bin_logits() + intercept
    total = float(np.sum(n))
    if total <= 0.0:
        return math.inf
    return float(np.sum(k * np.logaddexp(0.0, -eta) + (n - k) * np.logaddexp(0.0, eta))) / total


def prior_for(history: History) -> Prior:
    """The prior for a model trained by ``history`` (public: the plan): FULL_BATCH_PRIOR when
    every step saw every row with noise (the noise is what makes such a model
    over-confident), MINI_BATCH_PRIOR when every step sampled a batch with noise, else
    DEFAULT_PRIOR (a non-private model's, a history of both kinds, or a model fitted
    otherwise than by DP-SGD: its spend is events, not steps)."""
    steps = [step for step in history if isinstance(step, Mechanism)]
    if not history or len(steps) < len(history) or any(
            step.noise_multiplier <= 0 for step in steps):
        return DEFAULT_PRIOR
    if all(step.sample_rate >= 1.0 for step in steps):
        return FULL_BATCH_PRIOR
    if all(step.sample_rate < 1.0 for step in steps):
        return MINI_BATCH_PRIOR
    return DEFAULT_PRIOR


def calibrate(
    logits: np.ndarray, y: np.ndarray, noise_multiplier: float, rng: np.random.Generator,
    *, coarse: bool = False, prior: Prior = DEFAULT_PRIOR,
) -> Calibration:
    """Release the noisy binned counts of the calibration rows and fit Platt's map to them
    (``coarse``: on COARSE_EDGES' 6 bins) under ``prior`` (``prior_for`` the plan)."""
    edges = COARSE_EDGES if coarse else EDGES
    counts, positives = release_counts(logits, y, noise_multiplier, rng, edges)
    slope, intercept = fit_platt(counts, positives, noise_std=noise_multiplier * SENSITIVITY,
                                 edges=edges, prior=prior)
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
    history: History,
    delta: float,
    training_epsilon: float,
    rng: np.random.Generator | None = None,
    encoder: Encoder = BUILT_IN_ENCODER,
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
    calibration = calibrate(log_odds, y_holdout, noise, generator, coarse=coarse,
                            prior=prior_for(history))
    fold_into(network, calibration)
    return calibration


def size_floor_rows(noise_multiplier: float) -> int:
    """The calibration rows a meaningful release needs at this noise (``app.jobs.size_floor``:
    the rarer outcome, at most half the rows, summed over FLOOR_BINS bins, at least
    NOISE_FLOOR noise stds)."""
    return size_floor.calibration_floor(noise_multiplier=noise_multiplier, bins=FLOOR_BINS)


MINI_BATCH_FLOOR_SHARE = 0.5
"""A noisy mini-batch model's calibration is released (coarse) from this share of the size
floor up: under MINI_BATCH_PRIOR's tight identity map a release the noise swamps barely moves
the map, so the floor's reason (below it a loose prior's fit is the noise's) does not hold
there. Chosen on the proxy set and confirmed on tables it was not chosen on
(bench/proxy_study.py)."""


def release_floor_rows(noise_multiplier: float, history: History) -> int:
    """The calibration rows from which a model trained by ``history`` gets a release at this
    noise: the size floor, or MINI_BATCH_FLOOR_SHARE of it for a noisy mini-batch model."""
    floor = size_floor_rows(noise_multiplier)
    if prior_for(history) == MINI_BATCH_PRIOR:
        return math.ceil(MINI_BATCH_FLOOR_SHARE * floor)
    return floor


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
    history: History,
    delta: float,
    training_epsilon: float,
    noise_multiplier: float,
    encoder: Encoder = BUILT_IN_ENCODER,
    rng: np.random.Generator | None = None,
    rows: int | None = None,
) -> Calibration:
    """``calibrate_model`` when the calibration part meets its floor at this noise
    (``release_floor_rows``; the coarse release, 6 bins, below COARSE_BELOW times the size
    floor); else no release at all (``withheld``): below the floor the DP fit is the noise's
    and the prior's, and under a loose prior it hurt the log-loss more often than it helped
    (``bench/calibration_floor.py``). The floor reads public quantities only (the part's row
    count, the noise and the plan), so the choice releases nothing either. ``rng``: as
    ``calibrate_model``'s (a seeded one for benches on public tables only). ``rows``: the
    part's public size, where the release left patients out of the arrays (their number is
    private: it decides nothing and is never shown)."""
    rows = len(y_holdout) if rows is None else rows
    floor = size_floor_rows(noise_multiplier)
    if rows < release_floor_rows(noise_multiplier, history):
        return withheld(rows, noise_multiplier)
    released = calibrate_model(network, x_holdout, y_holdout, history=history, delta=delta,
                               training_epsilon=training_epsilon, encoder=encoder,
                               noise_multiplier=noise_multiplier, rng=rng,
                               coarse=rows < COARSE_BELOW * floor)
    return replace(released, rows=rows)
