"""The monitoring-power bench's core on a tiny setting (a 50,000-row training cohort, one
20,000-row follow-up at epsilon 1, 10 repeats, 200 bootstrap replicates): power rises with the
effect, a large effect is found, the unshifted follow-up stays quiet, and the tables print. So
the bench cannot rot (the figures themselves are for the bench: docs/benchmarks.md)."""

import math

import numpy as np
import pytest

from app.datasets.rules import max_delta
from bench import monitoring_power

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow


def test_power_rises_with_the_effect_and_an_unshifted_follow_up_is_quiet(
        capsys: pytest.CaptureFixture[str]) -> None:
    reference = monitoring_power.plan_reference(training_rows=50_000)
    assert reference.evaluation_share == pytest.approx(0.15)
    assert 0 < reference.noise_multiplier < 10 and min(reference.feature_std) > 1
    plan = monitoring_power.effects((0.01, 0.25), (0.105, 0.5))
    assert 0.75 < plan.auc < 0.9  # the generator's true probabilities on the release's bins
    assert plan.mix[1] == pytest.approx(0.25 / (plan.auc - 0.5))
    assert 0 < plan.shifted[0] < plan.shifted[1] < 1
    follow_up = monitoring_power.FollowUp(20_000, 1.0, max_delta(20_000))
    assert follow_up.noise_std == pytest.approx(
        3 * monitoring_power.monitoring_service.noise_for(1.0, 5e-6))  # sqrt(1 + 2 + 6)
    tally = monitoring_power.simulate(reference, follow_up, plan, 10, n_bootstrap=200)
    auc, psi = tally.power("auc"), tally.power("psi")
    assert tally.repeats == 10 and tally.withheld == 0
    assert auc[1] >= 0.8 and auc[1] > auc[0], auc  # observed: 0.0 at 0.01, 1.0 at 0.25
    assert psi[1] >= 0.8 and psi[1] >= psi[0], psi  # observed: 0.0-0.2 at 0.105, 1.0 at 0.5
    assert tally.null_worse + tally.null_better <= 1  # observed: 0 or 1 of 10 (seeds 0-3)
    assert tally.null_features == 60 and tally.null_drift <= 2  # observed: 0 of 60
    assert monitoring_power.smallest(plan.drops, auc) == 0.25
    dip = np.array([0.5, 0.9, 0.5, 0.85])
    assert monitoring_power.smallest((1.0, 2.0, 3.0, 4.0), dip) == 2.0
    assert monitoring_power._smallest_text((1.0, 2.0, 3.0, 4.0), dip, False) == (
        "2 (below 80% again from 3)")

    monitoring_power.report(reference, plan, [tally])
    printed = capsys.readouterr().out
    assert "| 20,000 | 5e-06 |" in printed and "10 repeats per size" in printed
    assert "| 0.105 | " in printed and "| 0.01 | 0." in printed


def test_no_effects_need_no_population() -> None:
    plan = monitoring_power.effects((), ())
    assert math.isnan(plan.auc) and plan.mix == plan.shifted == ()
