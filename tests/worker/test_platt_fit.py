"""The calibration's fit reads the released counts through the release's own noise."""

import numpy as np
import pytest

from app.privacy.accounting import MAX_NOISE_MULTIPLIER, Mechanism
from worker import calibration as cal
from worker import platt_fit

LOGITS = cal.bin_logits(cal.EDGES)
ONE_POINT = np.ones((len(LOGITS), 1))  # each bin at its representative logit alone
FAR_EDGES = np.array([-12.0, -10.0, -8.0, -6.0, -4.5, -3.0, -1.5, 0.0, 1.5, 3.0, 4.5, 6.0, 8.0,
                      10.0, 12.0])  # bins out to log-odds 12, as dp-platt-binned-v2 had


def _confident(rows: int, slope: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A model whose logits are far too large (the truth's slope: ``slope``), as a full-batch
    DP model on a well separated table: many rows beyond log-odds 8."""
    logits = rng.normal(0.0, 7.0, rows)
    return logits, rng.binomial(1, 1 / (1 + np.exp(-slope * logits))).astype(float)


def test_without_noise_the_fit_is_the_binomial_maximum() -> None:
    """At noise 0 the grid is the counts themselves: with each bin at one logit, the same MAP
    as the plain binomial fit."""
    logits, y = _confident(5_000, 0.6, np.random.default_rng(1))
    counts, positives = cal.release_counts(logits, y, 0.0, np.random.default_rng(0))
    exact = platt_fit.fit_clamped(counts, positives, logits=LOGITS, min_count=0.0,
                                  prior_mean=(1.0, 0.0), prior_sd=(0.3, 1.0))
    deconvolved = platt_fit.fit_deconvolved(
        counts, positives, noise_std=0.0, nodes=LOGITS[:, None], weights=ONE_POINT,
        prior_mean=(1.0, 0.0), prior_sd=(0.3, 1.0))
    assert deconvolved == pytest.approx(exact, abs=1e-5)


@pytest.mark.slow
def test_noise_in_a_confident_models_outer_bins_does_not_drag_the_slope_down() -> None:
    """400 calibration rows of a model 1/0.6 times over-confident, epsilon-1-like noise (std
    5.2 a count), bins out to log-odds 12, 100 draws of rows and noise: clamping the noisy
    positives reads phantom rows of the other outcome at logits of 8 to 13 and takes the slope
    to half the truth's, worse on fresh rows than no calibration; the release's own likelihood
    does better than either."""
    fresh, y_fresh = _confident(20_000, 0.6, np.random.default_rng(9))

    def log_loss(slope: float, intercept: float) -> float:
        z = slope * fresh + intercept
        return float(np.mean(y_fresh * np.logaddexp(0, -z) + (1 - y_fresh) * np.logaddexp(0, z)))

    std, fits = 5.2, []
    for draw in range(100):
        logits, y = _confident(400, 0.6, np.random.default_rng(100 + draw))
        counts, positives = cal.release_counts(logits, y, std / cal.SENSITIVITY,
                                               np.random.default_rng(draw), FAR_EDGES)
        clamped = platt_fit.fit_clamped(counts, positives, logits=cal.bin_logits(FAR_EDGES),
                                        min_count=cal.NOISE_FLOOR * std, prior_mean=(1.0, 0.0),
                                        prior_sd=(0.1, 1.0))
        deconvolved = cal.fit_platt(counts, positives, noise_std=std, edges=FAR_EDGES)
        fits.append((clamped[0], log_loss(*clamped), log_loss(*deconvolved)))
    clamped_slope, clamped_loss, deconvolved_loss = np.mean(fits, axis=0)
    assert clamped_slope < 0.6 - 0.2
    assert deconvolved_loss < min(clamped_loss, log_loss(1.0, 0.0))


def test_a_bin_the_noise_swamps_barely_moves_the_fit() -> None:
    """Two bins, one with 2,000 exact-ish rows, one nearly empty at logit 13 whose noisy
    release claims many positives: under noise std 5 it is nearly flat in the parameters."""
    counts, positives = np.zeros(len(LOGITS)), np.zeros(len(LOGITS))
    inner, outer = 10, len(LOGITS) - 1
    counts[inner], positives[inner] = 2_000.0, 2_000.0 / (1 + np.exp(-LOGITS[inner]))
    alone = cal.fit_platt(counts, positives, noise_std=5.0)
    counts[outer], positives[outer] = 3.0, -9.0  # a noisy empty bin: below zero positives
    with_outer = cal.fit_platt(counts, positives, noise_std=5.0)
    assert with_outer == pytest.approx(alone, abs=0.05)


def test_the_map_stays_increasing_whatever_the_release() -> None:
    """Counts that claim the outcome falls with the logit cannot turn the ranking round."""
    counts = np.full(len(LOGITS), 50.0)
    positives = np.linspace(50.0, 0.0, len(LOGITS))
    slope, _ = platt_fit.fit_deconvolved(counts, positives, noise_std=2.0,
                                         nodes=LOGITS[:, None], weights=ONE_POINT,
                                         prior_mean=(1.0, 0.0), prior_sd=(10.0, 10.0))
    assert slope == pytest.approx(platt_fit.MIN_SLOPE)


def test_the_prior_follows_the_plan_and_yields_to_the_counts() -> None:
    """A noisy full-batch model's prior slope is below 1 (its noise makes it over-confident);
    a noisy mini-batch model's is the identity map held tighter; a non-private model's, or a
    history of both kinds, the default. Where the counts are many, every prior yields: a
    calibrated model keeps slope 1, and a 3 times over-confident mini-batch model is brought
    back to about a third."""
    full_batch, mini_batch = [Mechanism(2.0, 1.0, 1000)], [Mechanism(1.0, 0.05, 400)]
    assert cal.prior_for(full_batch).slope_mean == cal.FULL_BATCH_PRIOR_SLOPE < 1.0
    assert cal.prior_for(mini_batch) == cal.MINI_BATCH_PRIOR
    assert cal.MINI_BATCH_PRIOR.slope_mean == 1.0
    assert cal.MINI_BATCH_PRIOR.slope_sd < cal.PRIOR_SLOPE_SD
    assert cal.prior_for([Mechanism(0.0, 1.0, 1000)]) == cal.DEFAULT_PRIOR  # non-private
    assert cal.prior_for([*full_batch, *mini_batch]) == cal.DEFAULT_PRIOR
    rng = np.random.default_rng(3)
    logits = rng.normal(-1.0, 2.0, 20_000)
    y = rng.binomial(1, 1 / (1 + np.exp(-logits))).astype(float)
    for history in (full_batch, mini_batch):
        fitted = cal.calibrate(logits, y, 1.0, np.random.default_rng(4),
                               prior=cal.prior_for(history))
        assert fitted.slope == pytest.approx(1.0, abs=0.05)
    fitted = cal.calibrate(3.0 * logits, y, 1.0, np.random.default_rng(4),
                           prior=cal.prior_for(mini_batch))
    assert fitted.slope == pytest.approx(1 / 3, abs=0.03)


def test_where_the_noise_is_wide_one_gaussian_a_bin_reads_the_release_as_the_sum_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Above WIDE_NOISE the fit reads each bin's release as one Gaussian (the grid would pass
    200 x 200 pairs a bin); at a noise std of 20, where both run, they agree."""
    rng = np.random.default_rng(5)
    logits = rng.normal(-1.0, 2.5, 20_000)
    y = rng.binomial(1, 1 / (1 + np.exp(-0.7 * logits))).astype(float)
    counts, positives = cal.release_counts(logits, y, 20.0 / cal.SENSITIVITY,
                                           np.random.default_rng(0))
    nodes, weights = cal.bin_points(cal.EDGES, counts)
    summed = platt_fit.fit_deconvolved(counts, positives, noise_std=20.0, nodes=nodes,
                                       weights=weights, prior_mean=(1.0, 0.0), prior_sd=(0.3, 1.0))
    monkeypatch.setattr(platt_fit, "WIDE_NOISE", 10.0)
    gaussian = platt_fit.fit_deconvolved(counts, positives, noise_std=20.0, nodes=nodes,
                                         weights=weights, prior_mean=(1.0, 0.0),
                                         prior_sd=(0.3, 1.0))
    assert gaussian == pytest.approx(summed, abs=0.01)
    largest = cal.calibrate(logits, y, MAX_NOISE_MULTIPLIER, np.random.default_rng(1))
    assert platt_fit.MIN_SLOPE <= largest.slope < 3.0 and abs(largest.intercept) < 5.0
