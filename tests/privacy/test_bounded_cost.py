"""The accountants and the noise search stay sound when they bound their own cost."""

import math

from app.privacy import noise
from app.privacy.accounting import Mechanism, PRVAccountant, RDPAccountant


def test_prv_beyond_its_domain_cap_returns_the_rdp_upper_bound() -> None:
    history = [Mechanism(0.6, 8 / 1_400_000, 875_000)]  # ~5 million PRV points at delta 1e-7
    assert PRVAccountant().epsilon(history, 1e-7) == RDPAccountant().epsilon(history, 1e-7)


def test_prv_within_its_domain_cap_is_tighter_than_rdp() -> None:
    history = [Mechanism(1.0, 256 / 5600, 440)]
    prv = PRVAccountant().epsilon(history, 1e-5)
    assert math.isfinite(prv)
    assert prv < RDPAccountant().epsilon(history, 1e-5)


def test_noise_search_past_its_deadline_returns_a_feasible_noise() -> None:
    kwargs = {"target_epsilon": 2.0, "delta": 1e-5, "sample_rate": 256 / 5600, "steps": 440}
    hurried = noise.noise_for_target(**kwargs, deadline_seconds=0.0)
    careful = noise.noise_for_target(**kwargs)
    assert PRVAccountant().epsilon([Mechanism(hurried, 256 / 5600, 440)], 1e-5) <= 2.0
    assert hurried >= careful
