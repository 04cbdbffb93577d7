"""The evaluation's bins follow the outcome's declared bands: public, the same for any
data, holding the cut-offs exactly, covering the declared stretch of log-odds in small steps, and
fine enough that binning alone costs a calibrated model's ROC-AUC under 0.01 at 10% and 50%
prevalence."""

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from app.bands import DEFAULT_BAND_THRESHOLDS
from app.datasets import synthetic
from worker.dp_histogram import (
    ABOVE_LOG_ODDS,
    BELOW_LOG_ODDS,
    MAX_STEPS,
    STEP_LOG_ODDS,
    bin_edges,
    release,
)
from worker.evaluation import evaluate

DECLARED = [(0.05, 0.2), (0.1, 0.25), (0.3, 0.6), (0.6, 0.85), (0.01, 0.011), (1e-6, 0.999999),
            (0.001, 0.9)]


def _bands(low: float, high: float) -> dict[str, float]:
    return {"low_medium": low, "medium_high": high}


def _log_odds(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


@pytest.mark.parametrize(("low", "high"), DECLARED)
def test_edges_hold_the_cut_offs_and_cover_the_declared_stretch(low: float, high: float) -> None:
    edges = bin_edges(_bands(low, high))
    assert np.all(np.diff(edges) > 0) and edges[0] > 0 and edges[-1] < 1
    assert low in edges and high in edges  # exactly: the band metrics are sums of bins
    z = _log_odds(edges)
    lo, hi = math.log(low / (1 - low)), math.log(high / (1 - high))
    assert z[0] == pytest.approx(lo - BELOW_LOG_ODDS, abs=1e-9)
    assert z[-1] == pytest.approx(hi + ABOVE_LOG_ODDS, abs=1e-9)
    span = z[-1] - z[0]
    assert np.diff(z).max() <= max(STEP_LOG_ODDS, span / MAX_STEPS) + 1e-9
    assert len(edges) - 1 <= MAX_STEPS + 3  # at most one extra step per stretch


def test_edges_follow_the_bands_not_a_fixed_grid() -> None:
    crisis = bin_edges(DEFAULT_BAND_THRESHOLDS)
    assert 15 <= len(crisis) + 1 <= 25
    common = bin_edges(_bands(0.4, 0.7))
    assert common[0] > 0.1 and common[-1] > 0.9  # a common outcome's scores get fine bins
    assert crisis[0] < 0.02 and crisis[-1] < 0.8  # a rare one's where its scores are
    # moving both cut-offs by d log-odds moves every edge by d log-odds (the same shape)
    moved = bin_edges(_bands(1 / (1 + 19 / math.e), 1 / (1 + 4 / math.e)))
    assert _log_odds(moved) - _log_odds(crisis) == pytest.approx(np.ones(len(crisis)), abs=1e-9)


def test_the_same_bins_for_any_data_and_every_histogram() -> None:
    table = synthetic.generate(3000, 21)
    groups = synthetic.subgroups(table.x, table.sex)
    rng = np.random.default_rng(0)
    releases = [release(y.astype(np.int64), p, groups, noise_multiplier=0.0,
                        thresholds=DEFAULT_BAND_THRESHOLDS, rng=rng)
                for y, p in ((table.y, table.p), (1 - table.y, rng.random(3000) ** 4),
                             (np.zeros(3000), np.full(3000, 0.5)))]
    for r in releases:
        assert np.array_equal(r.edges, bin_edges(DEFAULT_BAND_THRESHOLDS))
        assert r.overall.shape[0] == r.n_bins
        assert all(counts.shape[1] == r.n_bins for counts in r.groups.values())


def _calibrated_scores(prevalence: float, spread: float, n: int,
                       rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Log-odds normal around the prevalence, outcomes drawn from the scores (calibrated)."""
    z = rng.normal(0.0, spread, n)
    shift = math.log(prevalence / (1 - prevalence))
    for _ in range(50):  # the mean probability is the prevalence
        shift += (prevalence - float(np.mean(1 / (1 + np.exp(-(z + shift)))))) * 4
    p = 1 / (1 + np.exp(-(z + shift)))
    return (rng.random(n) < p).astype(np.float64), p


@pytest.mark.parametrize(("prevalence", "bands"), [(0.1, (0.1, 0.25)), (0.5, (0.5, 0.75))])
@pytest.mark.parametrize("spread", [0.5, 1.5])
def test_binning_alone_costs_under_001_auc(prevalence: float, bands: tuple[float, float],
                                           spread: float) -> None:
    """Exact counts (noise 0): the reported AUC differs from the scores' only by ties in a bin,
    for a weak model (log-odds spread 0.5: AUC about 0.63) and a strong one (1.5: about 0.8)."""
    y, p = _calibrated_scores(prevalence, spread, 20_000, np.random.default_rng(5))
    metrics = evaluate(y, p, groups={}, noise_multiplier=0.0, band_thresholds=_bands(*bands),
                       rng=np.random.default_rng(0), n_bootstrap=0)
    assert abs(metrics["roc_auc"] - roc_auc_score(y, p)) <= 0.01
