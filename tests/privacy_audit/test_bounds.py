"""The one-run epsilon lower bound (Steinke, Nasr and Jagielski 2023) and the attack metrics."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from app.privacy_audit import bounds, roc


def _paper_p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The paper's appendix algorithm, a plain loop: the reference for the vectorised one."""
    q = 1 / (1 + math.exp(-eps))
    tail = binom.sf(v - 1, r, q)
    alpha, total = 0.0, 0.0
    for i in range(1, v + 1):
        total += binom.pmf(v - i, r, q)
        alpha = max(alpha, total / i)
    return min(tail + 2 * m * delta * alpha, 1.0)


def _perfect(m: int) -> tuple[np.ndarray, np.ndarray]:
    included = np.random.default_rng(m).random(m) < 0.5
    return included.astype(float), included


@pytest.mark.parametrize(("m", "r", "v", "eps", "delta"), [
    (1000, 100, 90, 1.0, 1e-5), (200, 200, 200, 3.0, 1e-5), (100, 50, 40, 0.5, 1e-3),
    (50, 10, 0, 1.0, 1e-5), (1000, 1000, 530, 0.2, 0.0),
])
def test_p_value_matches_the_papers_algorithm(m: int, r: int, v: int, eps: float,
                                              delta: float) -> None:
    assert bounds.p_value(m, r, v, eps, delta)[0] == pytest.approx(
        _paper_p_value(m, r, v, eps, delta), rel=1e-9, abs=1e-15
    )


def test_the_bound_is_rejected_exactly_at_the_confidence_level() -> None:
    eps = bounds.lower_bound(1000, 100, 90, 1e-5, 0.05)
    assert 1.5 < eps < 1.7
    assert bounds.p_value(1000, 100, 90, eps, 1e-5)[0] <= 0.05
    assert bounds.p_value(1000, 100, 90, eps + 0.02, 1e-5)[0] > 0.05
    # Delta only ever weakens the evidence.
    assert eps <= bounds.lower_bound(1000, 100, 90, 0.0, 0.05)


def test_perfect_guesses_prove_more_with_more_canaries() -> None:
    for delta in (0.0, 1e-5):
        found = [bounds.audit(*_perfect(m), delta=delta).epsilon for m in (20, 50, 200, 1000)]
        assert all(a < b for a, b in zip(found, found[1:], strict=False)), found
    # Closed form at delta = 0: all r guesses right rejects q^r <= beta, eps = logit(beta^(1/r)).
    q = 0.05 ** (1 / 100)
    assert bounds.lower_bound(100, 100, 100, 0.0, 0.05) == pytest.approx(math.log(q / (1 - q)))


def test_random_guesses_prove_nothing() -> None:
    rng = np.random.default_rng(0)
    for m in (100, 1000, 5000):
        found = bounds.audit(rng.random(m), rng.random(m) < 0.5, delta=1e-5)
        assert found.epsilon < 0.15, found


def test_no_score_beats_perfect_guesses() -> None:
    m = 300
    ceiling = bounds.audit(*_perfect(m), delta=1e-5).epsilon
    rng = np.random.default_rng(1)
    included = rng.random(m) < 0.5
    for signal in (0.5, 2.0, 8.0, 100.0):
        scores = signal * included + rng.normal(size=m)
        assert bounds.audit(scores, included, delta=1e-5).epsilon <= ceiling


def test_an_eps_dp_mechanism_is_rarely_caught_above_its_eps() -> None:
    """Randomised response is exactly eps-DP and the tightest case for this audit: the bound
    may exceed eps with probability at most 1 - confidence (here it never does)."""
    eps, m, trials = 2.0, 1000, 60
    rng = np.random.default_rng(2)
    above, found = 0, []
    for _ in range(trials):
        included = rng.random(m) < 0.5
        truthful = rng.random(m) < math.exp(eps) / (1 + math.exp(eps))
        scores = np.where(truthful, included, ~included) + 1e-3 * rng.random(m)
        bound = bounds.audit(scores, included, delta=0.0).epsilon
        found.append(bound)
        above += bound > eps
    assert above <= 0.05 * trials
    assert np.mean(found) > 0.5 * eps  # and it is not vacuous: a real leak is measured


def test_the_guess_grid_and_its_union_bound() -> None:
    grid = bounds.guess_counts(1000)
    assert (0, 0) not in grid and (500, 500) in grid and len(grid) == 99
    assert all(0 < kp + km <= 1000 for kp, km in grid)
    result = bounds.audit(*_perfect(1000), delta=1e-5, confidence=0.95)
    assert result.tests == len(grid) and result.correct == result.guesses
    assert result.confidence == 0.95 and result.canaries == 1000


def test_attack_metrics() -> None:
    members, non_members = np.arange(100) + 100.0, np.arange(100.0)
    perfect = roc.attack_summary(members, non_members)
    assert perfect["roc_auc"] == 1.0 and perfect["advantage"] == 1.0
    assert perfect["tpr_at_1pct_fpr"] == 1.0 and perfect["tpr_at_0_1pct_fpr"] == 1.0
    assert perfect["roc"][0] == [0.0, 0.0] and perfect["roc"][-1] == [1.0, 1.0]
    tied = roc.attack_summary(np.zeros(50), np.zeros(50))
    assert tied["roc_auc"] == 0.5 and tied["advantage"] == 0.0
    rng = np.random.default_rng(3)
    chance = roc.attack_summary(rng.normal(size=2000), rng.normal(size=2000))
    assert abs(chance["roc_auc"] - 0.5) < 0.04 and chance["tpr_at_1pct_fpr"] < 0.05
    kept = np.array(chance["roc"])  # the kept curve still gives TPR at FPR <= 1% exactly
    assert kept[kept[:, 0] <= 0.01, 1].max() == chance["tpr_at_1pct_fpr"]
    assert chance["fpr_resolution"] == 1 / 2000 and len(chance["roc"]) <= len(roc.CURVE_FPRS) + 1
