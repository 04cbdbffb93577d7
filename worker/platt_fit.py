"""Platt's map fitted to binned counts released with Gaussian noise: the release's own likelihood.

Why: a bin's released counts are the true counts plus Gaussian noise of a known std. The fit
before (``fit_clamped``) read them as if they were counts: it clamped the positives to
[0, rows] and left out bins within two noise stds of empty. In a confident model's outer bins
(logits of 8 and more, where nearly every row has one outcome) the clamped noise then reads as
a few rows of the other outcome at the most extreme logits, and pulls the slope far below the
one the exact counts give (bench/calibration_fits.py). Here each bin's likelihood is that of
what was released: the binomial of the true counts convolved with the noise, summed over every
(rows, positives) pair within a few noise stds of the release (a flat prior on a bin's rows).
A bin whose noise swamps its counts is then nearly flat in the map's parameters, as it should
be, and no bin needs leaving out. Post-processing of the release only.
"""

from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize
from scipy.special import gammaln, logsumexp

MIN_SLOPE = 0.05  # keeps the map increasing: calibration never changes the ranking (AUC)
GRID_STDS = 4.0  # the true counts searched within this many noise stds of the release
WIDE_NOISE = 25.0
"""Above this noise std a bin's grid would pass 200 x 200 pairs (at the largest noise the
service allows, 100 x sqrt 2, a fit took seconds and a GiB): there the noise swamps the
binomial's own spread, and each bin's release is read as one Gaussian instead
(``_fit_gaussian``)."""


def _grid(count: float, positives: float, std: float) -> tuple[np.ndarray, np.ndarray,
                                                                  np.ndarray]:
    """One bin's (rows, positives) pairs near the release, and each pair's log weight: the
    noise's density of the release given the pair, times the binomial coefficient."""
    reach = GRID_STDS * std
    n_high = max(0, int(np.ceil(count + reach)))
    n = np.arange(min(n_high, max(0, int(np.floor(count - reach)))), n_high + 1)
    k_low = min(n_high, max(0, int(np.floor(positives - reach))))
    k = np.arange(k_low, max(k_low, min(n_high, int(np.ceil(positives + reach)))) + 1)
    rows, pos = (a.ravel() for a in np.meshgrid(n, k, indexing="ij"))
    keep = pos <= rows
    rows, pos = rows[keep], pos[keep]
    weight = gammaln(rows + 1.0) - gammaln(pos + 1.0) - gammaln(rows - pos + 1.0)
    if std > 0:
        weight -= ((count - rows) ** 2 + (positives - pos) ** 2) / (2.0 * std**2)
    return rows.astype(float), pos.astype(float), weight


def _grids(counts: np.ndarray, positives: np.ndarray, std: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every bin's grid, padded to one width (padding weighs -inf)."""
    grids = [_grid(float(c), float(p), std) for c, p in zip(counts, positives, strict=True)]
    width = max(len(g[0]) for g in grids)
    rows, pos = np.zeros((len(grids), width)), np.zeros((len(grids), width))
    weight = np.full((len(grids), width), -np.inf)
    for b, (n, k, w) in enumerate(grids):
        rows[b, :len(n)], pos[b, :len(n)], weight[b, :len(n)] = n, k, w
    return rows, pos, weight


def fit_deconvolved(counts: np.ndarray, positives: np.ndarray, *, noise_std: float,
                    nodes: np.ndarray, weights: np.ndarray, prior_mean: tuple[float, float],
                    prior_sd: tuple[float, float]) -> tuple[float, float]:
    """MAP (slope, intercept) of logit' = slope * logit + intercept under the release's
    likelihood and a Gaussian prior. A bin's probability is the mean of the map's over its
    logits: ``nodes`` (bins x points) with ``weights`` (each bin's summing to 1)."""
    counts, positives = np.asarray(counts, float), np.asarray(positives, float)
    mean, precision = np.array(prior_mean), np.array(prior_sd, float) ** -2.0
    if noise_std > WIDE_NOISE:
        return _fit_gaussian(counts, positives, float(noise_std), nodes, weights, mean,
                             precision)
    rows, pos, weight = _grids(counts, positives, float(noise_std))

    def negative(theta: np.ndarray) -> tuple[float, np.ndarray]:
        eta = theta[0] * nodes + theta[1]
        sig = 0.5 * (1.0 + np.tanh(0.5 * eta))
        p = np.clip(np.sum(weights * sig, axis=1), 1e-300, None)
        q = np.clip(np.sum(weights * (1.0 - sig), axis=1), 1e-300, None)
        terms = weight + pos * np.log(p)[:, None] + (rows - pos) * np.log(q)[:, None]
        per_bin = logsumexp(terms, axis=1)
        posterior = np.exp(terms - per_bin[:, None])
        expected_pos = np.sum(posterior * pos, axis=1)
        expected_neg = np.sum(posterior * (rows - pos), axis=1)
        slope_of_p = weights * sig * (1.0 - sig)  # d p / d eta at each point
        pull = expected_pos / p - expected_neg / q
        gradient = np.array([pull @ np.sum(slope_of_p * nodes, axis=1),
                             pull @ np.sum(slope_of_p, axis=1)]) - precision * (theta - mean)
        value = float(np.sum(per_bin) - 0.5 * np.sum(precision * (theta - mean) ** 2))
        return -value, -gradient

    return _maximised(negative, mean)


def _fit_gaussian(counts: np.ndarray, positives: np.ndarray, std: float, nodes: np.ndarray,
                  weights: np.ndarray, mean: np.ndarray, precision: np.ndarray
                  ) -> tuple[float, float]:
    """The release's likelihood where its noise is wide: a bin's noisy positives less p times
    its noisy rows are Gaussian, of variance n p (1 - p) (the binomial, n the rows clamped at 0)
    plus the noise's std^2 (1 + p^2)."""
    rows = np.clip(counts, 0.0, None)

    def negative(theta: np.ndarray) -> tuple[float, np.ndarray]:
        sig = 0.5 * (1.0 + np.tanh(0.5 * (theta[0] * nodes + theta[1])))
        p = np.sum(weights * sig, axis=1)
        residual = positives - p * counts
        variance = rows * p * (1.0 - p) + std**2 * (1.0 + p * p)
        value = float(-0.5 * np.sum(residual**2 / variance + np.log(variance))
                      - 0.5 * np.sum(precision * (theta - mean) ** 2))
        d_variance = rows * (1.0 - 2.0 * p) + 2.0 * std**2 * p
        pull = (residual * counts / variance + 0.5 * residual**2 * d_variance / variance**2
                - 0.5 * d_variance / variance)
        slope_of_p = weights * sig * (1.0 - sig)
        gradient = np.array([pull @ np.sum(slope_of_p * nodes, axis=1),
                             pull @ np.sum(slope_of_p, axis=1)]) - precision * (theta - mean)
        return -value, -gradient

    return _maximised(negative, mean)


def _maximised(negative: Callable[[np.ndarray], tuple[float, np.ndarray]],
               start: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) minimising ``negative`` (value and gradient) from ``start``, the
    slope held at MIN_SLOPE or above."""
    found = minimize(negative, start, jac=True, method="L-BFGS-B",
                     bounds=[(MIN_SLOPE, None), (None, None)])
    return float(found.x[0]), float(found.x[1])


def fit_clamped(counts: np.ndarray, positives: np.ndarray, *, logits: np.ndarray,
                min_count: float, prior_mean: tuple[float, float],
                prior_sd: tuple[float, float]) -> tuple[float, float]:
    """The fit before (``dp-platt-binned-v2``), kept for the benches that compare the two
    (``bench/calibration_fits.py``, ``bench/proxy_study.py --fit clamped``): the noisy counts
    read as counts, bins below ``min_count`` left out, positives clamped to [0, rows]; the
    objective is concave, so damped Newton steps converge."""
    n = np.where(counts >= min_count, np.clip(counts, 0.0, None), 0.0)
    k = np.clip(positives, 0.0, n)
    design = np.column_stack([logits, np.ones(len(n))])
    mean, precision = np.array(prior_mean), np.diag(np.array(prior_sd, float) ** -2.0)

    def objective(theta: np.ndarray) -> float:
        eta = design @ theta
        loglik = k * -np.logaddexp(0.0, -eta) + (n - k) * -np.logaddexp(0.0, eta)
        return float(np.sum(loglik) - 0.5 * (theta - mean) @ precision @ (theta - mean))

    theta = mean.copy()
    for _ in range(100):
        p = 0.5 * (1.0 + np.tanh(0.5 * (design @ theta)))
        gradient = design.T @ (k - n * p) - precision @ (theta - mean)
        hessian = design.T @ (design * (n * p * (1 - p))[:, None]) + precision
        step = np.linalg.solve(hessian, gradient)
        scale, current = 1.0, objective(theta)
        while objective(theta + scale * step) < current and scale > 1e-6:
            scale /= 2.0
        theta = theta + scale * step
        if float(np.max(np.abs(scale * step))) < 1e-10:
            break
    return max(float(theta[0]), MIN_SLOPE), float(theta[1])
