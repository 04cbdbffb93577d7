"""The accountants and the noise search stay sound when they bound their own cost."""

import math
import time

import pytest

from app.privacy import accounting, noise, pld
from app.privacy.accounting import Mechanism, PRVAccountant, RDPAccountant, rounding_margin


def test_headline_far_beyond_the_old_prv_cap_is_bounded_and_tight() -> None:
    """~5 million PRV points at delta 1e-7 (the old cap fell back to RDP): the PLD's interval
    grows instead, its PMFs stay within their caps, and it is far tighter than RDP."""
    history = [Mechanism(0.6, 8 / 1_400_000, 875_000)]
    entries = ((0.6, 8 / 1_400_000, 875_000),)
    for kind in (pld.AdjacencyType.REMOVE, pld.AdjacencyType.ADD):
        interval = pld.choose_interval(entries, pld.MAX_PMF_POINTS, kind)
        (step,) = pld.step_pmfs(entries, interval, kind)
        assert len(step[1]) <= pld.MAX_STEP_POINTS
        composed = pld.self_compose(step, 875_000)
        assert len(composed[1]) <= 1.5 * pld.MAX_PMF_POINTS  # sized by a coarser probe
    headline = PRVAccountant().epsilon(history, 1e-7)
    assert math.isfinite(headline)
    # Past 10^5 steps the figure carries its rounding margin (20% here), still far under RDP.
    assert headline == pytest.approx(pld.pld_epsilon(entries, 1e-7, pld.MAX_PMF_POINTS)
                                     / (1 - rounding_margin(history, 1e-7)))
    assert headline < 0.2 * RDPAccountant().epsilon(history, 1e-7)


def test_headline_falls_back_to_rdp_below_the_pld_tail_mass() -> None:
    """The PLD charges 1e-15 of truncated tail as infinite loss: at a smaller delta it cannot
    certify any epsilon, and the RDP bound (also an upper bound) is returned."""
    history = [Mechanism(1.0, 0.01, 1000)]
    assert PRVAccountant().epsilon(history, 1e-16) == RDPAccountant().epsilon(history, 1e-16)


def test_prv_within_its_domain_cap_is_tighter_than_rdp() -> None:
    history = [Mechanism(1.0, 256 / 5600, 440)]
    prv = PRVAccountant().epsilon(history, 1e-5)
    assert math.isfinite(prv)
    assert prv < RDPAccountant().epsilon(history, 1e-5)


def test_noise_search_out_of_evaluations_returns_a_feasible_noise() -> None:
    kwargs = {"target_epsilon": 2.0, "delta": 1e-5, "sample_rate": 256 / 5600, "steps": 440}
    hurried = noise.noise_for_target(**kwargs, max_evaluations=1)
    careful = noise.noise_for_target(**kwargs)
    assert PRVAccountant().epsilon([Mechanism(hurried, 256 / 5600, 440)], 1e-5) <= 2.0
    assert hurried >= careful


def test_noise_search_is_deterministic_whatever_the_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same request gives the same sigma on any machine: no clock is read (a wall-clock
    deadline made sigma depend on machine speed, and a test fail under load)."""
    kwargs = {"target_epsilon": 8.0, "delta": 1e-5, "sample_rate": 1 / 11, "steps": 220}
    first = noise.noise_for_target(**kwargs)

    def no_clock() -> float:
        raise AssertionError("the noise search read the clock")

    monkeypatch.setattr(time, "monotonic", no_clock)
    monkeypatch.setattr(time, "perf_counter", no_clock)
    accounting.clear_caches()
    assert noise.noise_for_target(**kwargs) == first
