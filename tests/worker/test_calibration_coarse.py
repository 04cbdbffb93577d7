"""The coarse calibration release (worker/calibration.py): on calibration parts
between the floor and twice the floor, 6 public logit bins and a looser slope prior, so that
an over-confident model's logits can be shrunk toward the base rate; below the floor nothing.

What the tests pin: which release a part gets is read from its row count and the noise only;
the coarse release has the same mechanism (per-bin rows and positives, Gaussian at the
held-out noise) on fewer public bins; its fit shrinks an over-confident model that the fine
fit's prior holds near slope 1; it never changes the ranking.
"""

import numpy as np
import pytest

from app.jobs import size_floor
from app.privacy.accounting import Mechanism
from app.registry.network import build_network
from worker import calibration as cal
from worker import platt_fit
from worker.held_out_floors import held_out_warnings

NOISE = 3.73  # the held-out noise at epsilon 1, delta 1e-5, full batch


def _overconfident(n: int, scale: float, rng: np.random.Generator) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """Logits ``scale`` times the true log-odds, and outcomes drawn from the true ones."""
    true = rng.normal(-1.0, 1.2, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-true))).astype(float)
    return scale * true, y


@pytest.mark.parametrize(("rows", "method"), [
    ("below_floor", size_floor.CALIBRATION_WITHHELD), ("at_floor", cal.COARSE_METHOD),
    ("below_twice", cal.COARSE_METHOD), ("twice", cal.METHOD)])
def test_the_part_size_and_the_noise_pick_the_release(rows: str, method: str) -> None:
    floor = cal.size_floor_rows(NOISE)
    n = {"below_floor": floor - 1, "at_floor": floor,
         "below_twice": int(cal.COARSE_BELOW * floor) - 1,
         "twice": int(np.ceil(cal.COARSE_BELOW * floor))}[rows]
    rng = np.random.default_rng(3)
    x = np.column_stack([rng.integers(18, 81, n), rng.integers(0, 28, n),
                         rng.integers(1, 101, n), rng.integers(0, 51, n),
                         rng.integers(0, 2, n), rng.integers(0, 2, n)]).astype(float)
    y = (rng.random(n) < 0.3).astype(float)
    record = cal.calibrate_if_meaningful(
        build_network("logistic"), x, y, history=[Mechanism(83.8, 1.0, 500)], delta=1e-5,
        training_epsilon=1.0, noise_multiplier=NOISE, rng=np.random.default_rng(0))
    assert record.method == method and record.rows == n
    if method == cal.COARSE_METHOD:
        assert record.bin_edges_logit == list(cal.COARSE_EDGES)
        assert len(record.noisy_counts) == len(cal.COARSE_EDGES) + 1


@pytest.mark.parametrize(("history", "from_share"), [
    ([Mechanism(83.8, 1.0, 500)], 1.0),  # noisy full batch: the size floor
    ([Mechanism(2.0, 0.3, 60)], cal.MINI_BATCH_FLOOR_SHARE),  # noisy mini-batch: its share
    ([Mechanism(0.0, 0.3, 60)], 1.0)])  # non-private: the size floor
def test_a_noisy_mini_batch_model_is_released_from_its_share_of_the_floor(
        history: list[Mechanism], from_share: float) -> None:
    """Under the mini-batch prior's tight identity map a release the noise swamps barely moves
    the map, so such a model's coarse release begins below the size floor; the plan (public)
    decides, never the rows. The held-out warning names the same minimum."""
    floor = cal.size_floor_rows(NOISE)
    assert cal.release_floor_rows(NOISE, history) == int(np.ceil(from_share * floor))
    rng = np.random.default_rng(5)
    n = int(np.ceil(cal.MINI_BATCH_FLOOR_SHARE * floor)) + 2  # under the floor, over its share
    x = np.column_stack([rng.integers(18, 81, n), rng.integers(0, 28, n),
                         rng.integers(1, 101, n), rng.integers(0, 51, n),
                         rng.integers(0, 2, n), rng.integers(0, 2, n)]).astype(float)
    y = (rng.random(n) < 0.3).astype(float)
    record = cal.calibrate_if_meaningful(
        build_network("logistic"), x, y, history=history, delta=1e-5, training_epsilon=1.0,
        noise_multiplier=NOISE, rng=np.random.default_rng(0))
    released = from_share < 1.0
    assert record.method == (cal.COARSE_METHOD if released else size_floor.CALIBRATION_WITHHELD)
    if not released:
        metrics = {"release": {"noise_std": 1.0, "bins": list(range(13))}}
        warning = held_out_warnings(calibration=record, metrics=metrics, evaluation_rows=10**6,
                                    epsilon=1.0, history=history)[0]
        assert (warning["release"], warning["minimum_rows"]) == ("calibration", floor)
    else:  # the map stays near the identity: the tight prior and the swamped counts
        assert abs(record.slope - 1.0) < 0.5 and abs(record.intercept) < 0.6


@pytest.mark.slow
def test_on_a_small_noisy_part_the_coarse_fit_shrinks_an_overconfident_model_further() -> None:
    """150 calibration rows at epsilon 1's noise (the rule's coarse range), a model 3 times
    over-confident (the truth's slope: 1/3), 200 draws of rows and noise: the coarse fit's
    slope is lower and its log-loss on fresh rows below the fine fit's and the base rate's
    (fewer bins: each bin's counts stand further above the same noise)."""
    fresh, y_fresh = _overconfident(20_000, 3.0, np.random.default_rng(9))

    def log_loss(slope: float, intercept: float) -> float:
        z = slope * fresh + intercept
        return float(np.mean(y_fresh * np.logaddexp(0, -z) + (1 - y_fresh) * np.logaddexp(0, z)))

    fits = []
    for draw in range(200):
        logits, y = _overconfident(150, 3.0, np.random.default_rng(100 + draw))
        fine = cal.calibrate(logits, y, NOISE, np.random.default_rng(draw))
        coarse = cal.calibrate(logits, y, NOISE, np.random.default_rng(draw), coarse=True)
        fits.append((fine.slope, coarse.slope, log_loss(fine.slope, fine.intercept),
                     log_loss(coarse.slope, coarse.intercept)))
    fine_slope, coarse_slope, fine_loss, coarse_loss = np.mean(fits, axis=0)
    prevalence = float(np.mean(y_fresh))
    base = -(prevalence * np.log(prevalence) + (1 - prevalence) * np.log1p(-prevalence))
    assert coarse_slope < fine_slope - 0.03
    assert coarse_loss < min(fine_loss, base) < log_loss(1.0, 0.0)


def test_a_coarse_release_keeps_the_ranking_and_carries_noise_at_the_held_out_scale() -> None:
    logits, y = _overconfident(3_000, 2.0, np.random.default_rng(4))
    draws = np.array([cal.release_counts(logits, y, NOISE, np.random.default_rng(s),
                                         cal.COARSE_EDGES)[0] for s in range(2000)])
    exact = cal.release_counts(logits, y, 0.0, np.random.default_rng(0), cal.COARSE_EDGES)[0]
    assert np.allclose(draws.std(axis=0), NOISE * cal.SENSITIVITY, rtol=0.08)
    assert np.allclose(draws.mean(axis=0), exact, atol=0.6)
    record = cal.calibrate(logits, y, NOISE, np.random.default_rng(5), coarse=True)
    assert record.slope >= platt_fit.MIN_SLOPE  # an increasing map: the ranking (AUC) is kept
