"""A monitoring run's or comparison's job is one Gaussian release, not DP-SGD: its row holds no
made-up sample rate, steps, epochs or clip norm, and its views cope with their absence."""

import pytest
from dp_accounting import GaussianDpEvent
from dp_accounting.pld import PLDAccountant

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import jobs as job_flow
from app.flows import training as training_flow
from app.jobs.models import MONITORING, NotDpSgd
from app.jobs.service import JobNotFound
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.monitoring import service as monitoring_service
from app.monitoring.schemas import MonitoringPayload
from tests.conftest import small_dataset


def test_a_one_release_job_has_no_dp_sgd_plan_and_shows_its_gaussian(db: Database) -> None:
    with db.session_scope() as session:
        dataset = dataset_service.create(
            session=session, request=DatasetCreate.model_validate(small_dataset()))
        job = monitoring_service.queue_release(
            session=session, dataset=dataset, kind=MONITORING, target=2.0,
            payload=MonitoringPayload(model_id=1))
        assert (job.training, job.payload) == (None, {"model_id": 1, "notes": []})
        assert (job.sample_rate, job.steps, job.epochs, job.max_grad_norm) == (None,) * 4
        assert not job.dp_sgd
        with pytest.raises(NotDpSgd):
            job.dp_sgd_plan  # noqa: B018 - the property raises
        view = training_flow.job_view(session=session, job=job)
        assert (view.training, view.payload) == (None, {"model_id": 1, "notes": []})
        assert view.privacy.sample_rate is None and view.privacy.steps is None
        assert view.privacy.max_grad_norm is None and view.progress.epochs is None
        accountant = PLDAccountant()
        accountant.compose(GaussianDpEvent(job.noise_multiplier))
        planned = view.privacy.epsilon_planned["pld"]
        assert planned == pytest.approx(accountant.get_epsilon(job.delta), rel=1e-3)
        assert planned <= 2.0 + 1e-6
        entry = ledger_service.entry_of(session=session, scope=Scope.job(job.id))
        assert entry is not None and entry.steps == 1 and entry.sample_rate == 1.0
        with pytest.raises(JobNotFound, match="not DP-SGD"):
            job_flow.privacy_report(session=session, job_id=job.id)
