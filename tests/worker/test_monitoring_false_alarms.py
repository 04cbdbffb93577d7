"""False alarms of a monitoring run on an unshifted follow-up, over repeated simulated runs
(the goal: a run "flags nothing on an unshifted follow-up of the same size").

Each repeat draws what a run compares, with the service's code (``bench/monitoring_power.py``):
a training cohort of 100,000 generator rows whose model (the generator's true probabilities)
was trained at epsilon 3 (budget delta 1e-7: the API test's), its training-time evaluation
release (15% of the rows, held-out noise from the job's plan) and its reference feature
release at the run's target; then an unshifted follow-up's one release
(``worker.monitoring.task.release_follow_up``) and the verdicts
(``worker.monitoring.drift.performance_drift`` on overall ROC-AUC, ``feature_drift`` on each of
the 6 features), 1,000 bootstrap replicates as in the worker. Two follow-ups: the API test's
(50,000 rows, target epsilon 8, delta 1e-6) and a small one whose noise per cell is large
against its counts (5,000 rows, about 110 positives, target epsilon 1, delta 2e-5).

Measured over 200 repeats (seed 30; the test runs 120, to keep the suite's time): ROC-AUC "worse"
3.0% (6 of 200) on the API test's follow-up and 0% on the small one (its ROC-AUC withheld, below
the noise floor, in 69), against the 2.5% one-sided rate a 95% interval allows; "better" 2.5% and
1.0%. Before ROC-AUC was read off the counts as released (``worker.monitoring.ratios``), the small
follow-up's projected AUC ran high (+0.02 to +0.03 on average) and came out "better" in 32 of the
same 200 repeats (16%); "worse" was the same 6 and 0. Feature "drift": 0 of 1,200 verdicts on
either.
"""

import pytest

from app.datasets.rules import max_delta
from bench.monitoring_power import (
    FollowUp,
    effects,
    plan_reference,
    simulate,
    slope_verdict,
)

pytestmark = pytest.mark.slow  # 120 repeats of a run's release and verdicts per follow-up

REPEATS = 120


@pytest.mark.parametrize("follow_up", [FollowUp(50_000, 8.0, 1e-6),
                                       FollowUp(5_000, 1.0, max_delta(5_000))],
                         ids=["api-test-50000-rows-epsilon-8", "small-5000-rows-epsilon-1"])
def test_an_unshifted_follow_up_rarely_alarms(follow_up: FollowUp) -> None:
    reference = plan_reference(100_000, training_epsilon=3.0, budget_delta=1e-7,
                               run_epsilon=follow_up.epsilon)
    tally = simulate(reference, follow_up, effects((), ()), REPEATS, seed=30)
    assert tally.repeats == REPEATS and tally.withheld <= 0.5 * REPEATS
    assert tally.null_worse <= 0.05 * REPEATS, tally  # the goal's bound on false "worse"
    assert tally.null_better <= 0.05 * REPEATS, tally  # the projection's pull made it 11-15%
    assert tally.null_drift <= 0.02 * tally.null_features, tally


def test_an_unshifted_follow_ups_calibration_slope_rarely_alarms() -> None:
    """The API test's follow-up, 120 repeats: the calibration slope's "worse" stays within 5%.
    Measured (seed 7, 200 repeats): "worse" 4.5%, "better" 5.5%, both sides' slopes near 1.05;
    judged on the distance from 1's own bootstrap, "worse" was 32% (13 of 40), the reference's
    replicates straddling 1."""
    follow_up = FollowUp(50_000, 8.0, 1e-6)
    reference = plan_reference(100_000, training_epsilon=3.0, budget_delta=1e-7,
                               run_epsilon=follow_up.epsilon)
    verdicts = [slope_verdict(reference, follow_up, seed=(7, r)) for r in range(120)]
    assert verdicts.count("worse") <= 0.05 * len(verdicts), verdicts
    assert verdicts.count("better") <= 0.08 * len(verdicts), verdicts
