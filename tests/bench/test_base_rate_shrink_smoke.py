"""The base-rate shrink bench: its map keeps the ranking, reads the release it names, and
lowers the log-loss of an over-confident model on a simulated case."""

import numpy as np
from sklearn.metrics import roc_auc_score

from bench import base_rate_shrink as shrink_bench
from bench.peers import scores
from worker import calibration as cal


def _job(release: cal.Calibration, logits: np.ndarray, y: np.ndarray) -> shrink_bench.Job:
    return shrink_bench.Job("sim", 0, 1.0, logits, y, 0.2, 0.5, release, 12.0, 60, 3.0)


def test_the_shrink_keeps_every_ranking_and_reaches_the_base_rate_at_one() -> None:
    rng = np.random.default_rng(3)
    z, y = rng.normal(0, 2, 400), rng.binomial(1, 0.3, 400)
    for w in (0.0, 0.3, 0.9):
        shrunk = shrink_bench.shrink(z, w, 0.2)
        assert np.all(np.diff(shrunk[np.argsort(z)]) >= 0)  # increasing: the AUC unchanged
        assert roc_auc_score(y, shrunk) == roc_auc_score(y, z)
    assert np.allclose(shrink_bench.sigmoid(shrink_bench.shrink(z, 1.0, 0.2)), 0.2)


def test_a_shrink_lowers_an_over_confident_models_log_loss() -> None:
    rng = np.random.default_rng(4)
    truth = rng.normal(-1.4, 0.6, 5000)  # a weak signal around a 20% outcome
    y = rng.binomial(1, shrink_bench.sigmoid(truth))
    over_confident = 4.0 * (truth + 1.4) - 2.5  # four times too steep, and too low
    before = scores(y, shrink_bench.sigmoid(over_confident)).log_loss
    after = scores(y, shrink_bench.sigmoid(shrink_bench.shrink(over_confident, 0.7,
                                                               float(y.mean())))).log_loss
    assert after < before - 0.05


def test_the_released_base_rate_reads_the_release_or_one_count_where_withheld() -> None:
    rng = np.random.default_rng(5)
    released = cal.calibrate(rng.normal(-1, 1, 60), rng.binomial(1, 0.2, 60).astype(float),
                             1.0, rng, coarse=True)
    job = _job(released, np.zeros(10), np.zeros(10))
    expected = np.clip(sum(released.noisy_positives) / 60, 0.5 / 60, 1 - 0.5 / 60)
    assert shrink_bench.released_base_rate(job, rng) == expected
    withheld = _job(cal.withheld(60, 3.0), np.zeros(10), np.zeros(10))
    draws = [shrink_bench.released_base_rate(withheld, rng) for _ in range(2000)]
    assert abs(np.mean(draws) - 12 / 60) < 0.01  # the count's noise: std 3 rows
    assert shrink_bench.selected_weight(withheld, 0.2) == 0.0  # nothing released to select by


def test_the_selected_weight_follows_the_release_when_its_noise_is_small() -> None:
    rng = np.random.default_rng(6)
    logits = rng.normal(-1.4, 2.0, 4000)  # a model whose logits carry no signal
    y = rng.binomial(1, 0.2, 4000).astype(float)
    release = cal.calibrate(logits, y, 0.01, rng)
    b = float(np.sum(release.noisy_positives) / len(y))
    assert shrink_bench.selected_weight(_job(release, logits, y), b) >= 0.8
