"""The peer-draws bench: fresh noise per draw on every split, and a miss rate that reads the
margin the study's goal states."""

import numpy as np
import pytest

from bench import peer_draws


def test_the_miss_rate_is_the_share_of_samples_below_the_margin() -> None:
    rng = np.random.default_rng(1)
    level = np.full((peer_draws.SPLITS, 4), 0.70)
    assert peer_draws.miss_rate(level, level, rng) == 0.0  # equal, no draw-to-draw noise
    assert peer_draws.miss_rate(level - 0.006, level, rng) == 1.0  # 0.006 behind: always
    assert peer_draws.miss_rate(level - 0.004, level, rng) == 0.0  # within the margin
    noisy = 0.70 + rng.normal(0, 0.02, (peer_draws.SPLITS, 50))
    assert 0.2 < peer_draws.miss_rate(noisy, noisy, rng) < 0.5  # itself: chance, either way


def test_a_loss_misses_when_it_is_above_the_peer_by_more_than_the_margin() -> None:
    rng = np.random.default_rng(2)
    level = np.full((peer_draws.SPLITS, 4), 0.40)
    assert peer_draws.miss_rate(level + 0.006, level, rng, lower_is_better=True) == 1.0
    assert peer_draws.miss_rate(level - 0.006, level, rng, lower_is_better=True) == 0.0
    assert peer_draws.miss_rate(level + 0.004, level, rng, lower_is_better=True) == 0.0


def test_the_paired_standard_error_reads_the_rows_difference() -> None:
    y = np.array([0.0, 1.0] * 50)
    flat = np.full(len(y), 0.5)
    assert peer_draws.paired_se(y, flat, flat) == 0.0  # the same probabilities: no spread
    sharper = np.where(y == 1, 0.6, 0.4)  # better on every row by the same amount
    assert peer_draws.paired_se(y, sharper, flat) < 1e-12
    mixed = np.where(np.arange(len(y)) % 4 < 2, sharper, 1 - sharper)  # half better, half worse
    # per row -log(1.2) or +log(1.25): a spread of half log(1.5) around their mean
    expected = np.log(1.5) / 2 * np.sqrt(len(y) / (len(y) - 1)) / np.sqrt(len(y))
    assert abs(peer_draws.paired_se(y, mixed, flat) / expected - 1.0) < 1e-9


@pytest.mark.slow
def test_each_draw_is_a_fresh_job_on_the_same_split() -> None:
    ours, opacus = peer_draws.draws("mixed@800", 1.0, 2)
    for auc in (ours, opacus):
        assert auc.shape == (peer_draws.SPLITS, 2) and np.all((auc > 0.4) & (auc <= 1.0))
        assert np.all(auc[:, 0] != auc[:, 1])  # the noise differs between draws
