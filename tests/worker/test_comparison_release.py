"""A champion/challenger release (``worker.monitoring.comparison.release_pair``): one
Gaussian release of both models' histograms at sqrt(2 (1 + groupings)) sensitivity, whose
difference finds a clearly better challenger beyond the noise and rarely calls equal models
different."""

import math

import numpy as np
import pytest

from app.datasets.parts import PartRows
from worker.evaluation import evaluate, evaluated
from worker.monitoring.comparison import release_pair, withhold_alike
from worker.monitoring.drift import performance_drift

EDGES = np.array([0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
THRESHOLDS = {"low_medium": 0.1, "medium_high": 0.3}


def _rows(n: int, rng: np.random.Generator) -> tuple[PartRows, np.ndarray]:
    """Rows with an outcome and a latent risk; one grouping of two groups."""
    latent = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(latent * 1.5 - 1.5)))).astype(np.int64)
    groups = {"sex": (rng.integers(0, 2, n), ["female", "male"])}
    return PartRows(np.zeros((n, 1)), y, groups, n), latent


def _model(latent: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Scores that see the latent risk through ``noise`` (more noise: a worse ranking)."""
    seen = latent + rng.normal(0, noise, len(latent))
    return 1 / (1 + np.exp(-(seen * 1.2 - 1.2)))


def _verdict(rows: PartRows, scores: tuple[np.ndarray, np.ndarray], seed: int) -> dict:
    rng = np.random.default_rng(seed)
    first, second = release_pair(rows, scores, edges=EDGES, noise_multiplier=2.0, rng=rng)
    assert first.l2_sensitivity == second.l2_sensitivity == math.sqrt(2 * (1 + 1))
    ours, theirs = (evaluated(r, THRESHOLDS, rng, 300) for r in (first, second))
    drift = performance_drift(ours["release"], theirs["release"], thresholds=THRESHOLDS,
                              rng=rng, n_bootstrap=300)
    return dict(drift["overall"]["roc_auc"])


def test_a_clearly_better_challenger_is_better() -> None:
    rng = np.random.default_rng(0)
    rows, latent = _rows(20000, rng)
    weak, strong = _model(latent, 1.5, rng), _model(latent, 0.3, rng)
    found = _verdict(rows, (weak, strong), seed=1)
    assert found["verdict"] == "better" and found["change_ci"][0] > 0, found
    assert _verdict(rows, (strong, weak), seed=2)["verdict"] == "worse"


@pytest.mark.slow
def test_the_same_model_is_rarely_called_better_or_worse() -> None:
    """Both sides the same scores: 40 releases, at most 2 called better or worse (the
    interval is 95% and resamples each side alone, wider than a paired one)."""
    rng = np.random.default_rng(3)
    rows, latent = _rows(5000, rng)
    scores = _model(latent, 0.8, rng)
    verdicts = [_verdict(rows, (scores, scores), seed=10 + k)["verdict"] for k in range(40)]
    assert sum(v in ("better", "worse") for v in verdicts) <= 2, verdicts


def test_every_cell_has_the_noise_of_the_shared_sensitivity() -> None:
    rng = np.random.default_rng(4)
    rows, latent = _rows(2000, rng)
    scores = _model(latent, 0.5, rng)
    exact, _ = release_pair(rows, (scores, scores), edges=EDGES, noise_multiplier=0.0, rng=rng)
    draws = [release_pair(rows, (scores, scores), edges=EDGES, noise_multiplier=1.0,
                          rng=np.random.default_rng(100 + k))[1].overall - exact.overall
             for k in range(200)]
    assert np.std(draws) == np.std(draws)  # finite
    assert abs(float(np.std(draws)) - 2.0) < 0.05  # sqrt(2 (1 + 1)) = 2


def test_a_figure_one_model_cannot_support_is_withheld_for_both() -> None:
    """At epsilon 1 the champion's ROC-AUC was withheld and the challenger's shown: the same
    rows and noise, so neither is shown, with the reason."""
    rng = np.random.default_rng(3)
    y = (rng.random(2000) < 0.3).astype(np.int64)
    p = np.clip(0.1 + 0.3 * y + rng.normal(0, 0.05, 2000), 0.001, 0.999)
    ours, theirs = (evaluate(y, p, groups={}, noise_multiplier=1.0,
                             band_thresholds=THRESHOLDS, rng=rng, n_bootstrap=20)
                    for _ in range(2))
    ours["roc_auc"], ours["roc_auc_ci"] = None, None  # as the floor withholds it
    assert theirs["roc_auc"] is not None and theirs["brier"] is not None
    assert withhold_alike(ours, theirs)
    assert theirs["roc_auc"] is None and theirs["roc_auc_ci"] is None
    assert theirs["brier"] is not None  # shown for both: untouched
    assert not withhold_alike(ours, theirs)  # nothing left to align
