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


@pytest.mark.slow
def test_each_draw_is_a_fresh_job_on_the_same_split() -> None:
    ours, opacus = peer_draws.draws("mixed@800", 1.0, 2)
    for auc in (ours, opacus):
        assert auc.shape == (peer_draws.SPLITS, 2) and np.all((auc > 0.4) & (auc <= 1.0))
        assert np.all(auc[:, 0] != auc[:, 1])  # the noise differs between draws
