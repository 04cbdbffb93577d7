"""A monitoring run's and a comparison's one Gaussian release (``monitoring_service.
queue_release``) is charged as exactly that event: over random sequences of releases on one
follow-up, every ledger entry records ``GaussianDpEvent(noise)``, the ledger's spend at any RDP
order equals the independent closed form (sum of alpha / (2 sigma^2)), and each release alone,
by dp-accounting's PLD accountant, stays within its target."""

import itertools

import pytest
from dp_accounting import ComposedDpEvent, GaussianDpEvent
from dp_accounting.pld import PLDAccountant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.jobs.models import COMPARISON, MONITORING
from app.ledger import service as ledger_service
from app.ledger import spend
from app.ledger.release import Scope
from app.monitoring import service as monitoring_service
from app.monitoring.comparison_schemas import ComparisonPayload
from app.monitoring.schemas import MonitoringPayload

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

DELTA = 1e-6
CASES = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])
SEEDS = itertools.count(1000)


@CASES
@given(targets=st.lists(st.floats(0.2, 3.0), min_size=1, max_size=4),
       kinds=st.lists(st.sampled_from([MONITORING, COMPARISON]), min_size=4, max_size=4))
def test_spend_is_the_composition_of_the_releases(db: Database, targets: list[float],
                                                  kinds: list[str]) -> None:
    with db.session_scope() as session:
        dataset = dataset_service.create(session=session, request=DatasetCreate.model_validate(
            {"name": "follow-up", "source": {"kind": "synthetic", "n_rows": 2000,
                                             "seed": next(SEEDS)},
             "privacy_budget": {"epsilon": 50.0, "delta": DELTA}}))
        noises = []
        for target, kind in zip(targets, kinds, strict=False):
            job = monitoring_service.queue_release(
                session=session, dataset=dataset, kind=kind, target=target,
                payload=MonitoringPayload(model_id=1) if kind == MONITORING
                else ComparisonPayload(champion_id=1, challenger_id=2))
            ledger_service.commit(session=session, scope=Scope.job(job.id))
            noises.append(job.noise_multiplier)
            alone = PLDAccountant()
            alone.compose(GaussianDpEvent(job.noise_multiplier))
            assert alone.get_epsilon(DELTA) <= target + 1e-6
        entries = spend.charged_entries(session=session, dataset_id=dataset.id)
        assert [spend.recorded_event(e) for e in entries] == [
            ComposedDpEvent([GaussianDpEvent(noise)]) for noise in noises]
        for order in (2.0, 8.0, 32.0):
            independent = sum(order / (2 * noise**2) for noise in noises)
            assert spend.spent_rdp(entries, order) == pytest.approx(independent, rel=1e-9)
