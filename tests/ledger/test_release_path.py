"""One reserve path for every kind of spend: a ``Release`` (scope, event, kind) admitted by the
same filter and chained the same way; a new kind is one ``ReleaseKind``, nothing else."""

from typing import Any, NoReturn

import pytest
from sqlalchemy import func, select

from app.core.database import Database
from app.datasets import service as dataset_service
from app.datasets.schemas import DatasetCreate
from app.flows import training as training_flow
from app.jobs.schemas import JobCreate
from app.ledger import release as ledger_release
from app.ledger import service as ledger_service
from app.ledger import statistics as ledger_statistics
from app.ledger.admission import Shortfall
from app.ledger.models import LedgerEntry
from app.ledger.release import Release, Scope
from app.privacy import accounting, events
from tests.conftest import FAST_TRAINING, small_dataset


class Refused(RuntimeError):
    pass


class Tally:
    """A kind of spend written in a test: DP-SGD's columns, its own refusal."""

    name = "tally"

    def columns(self, said: events.Description) -> dict[str, Any]:
        return ledger_service.STEP_COMPOSED.columns(said)

    def refuse(self, refused: Shortfall, entry: LedgerEntry, release: Release) -> NoReturn:
        raise Refused(f"{self.name}: {refused.spent:.3f} spent")


def _dataset_and_job(db: Database) -> tuple[int, int]:
    with db.session_scope() as session:
        dataset = dataset_service.create(
            session=session, request=DatasetCreate.model_validate(small_dataset()))
        request = JobCreate.model_validate(
            {"dataset_id": dataset.id, "privacy": {"noise_multiplier": 2.0},
             "training": {**FAST_TRAINING, "epochs": 2}})
        return dataset.id, training_flow.submit_training(session=session, request=request).id


def test_a_job_entry_is_found_by_its_scope_and_its_chain_verifies(db: Database) -> None:
    dataset_id, job_id = _dataset_and_job(db)
    with db.session_scope() as session:
        entry = ledger_release.entry_of(session=session, scope=Scope.job(job_id))
        assert entry is not None and entry.job_id == job_id
        assert entry.id == ledger_service.entry_of(session=session, scope=Scope.job(job_id)).id
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        assert ledger_service.verify_chain(session=session, dataset=dataset)["valid"]


def test_a_new_kind_is_admitted_by_the_same_filter_and_refused_in_its_own_words(
    db: Database,
) -> None:
    dataset_id, job_id = _dataset_and_job(db)
    huge = accounting.Mechanism(0.3, 1.0, 5000).event  # far beyond any budget
    with db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        before = session.scalar(select(func.count()).select_from(LedgerEntry))
        with pytest.raises(Refused, match="tally"):
            ledger_service.reserve_release(session=session, dataset=dataset, release=Release(
                scope=Scope.job(job_id + 1), event=huge, delta=1e-6, kind=Tally()))
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == before


def test_an_event_of_another_shape_is_refused_before_anything_is_written(
    db: Database,
) -> None:
    dataset_id, job_id = _dataset_and_job(db)
    dp_sgd = accounting.Mechanism(2.0, 0.01, 10).event
    with db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=dataset_id)
        with pytest.raises(ValueError, match="one-shot"):
            ledger_service.reserve_release(session=session, dataset=dataset, release=Release(
                scope=Scope.job(job_id + 1), event=dp_sgd, delta=1e-6,
                kind=ledger_statistics.ONE_SHOT, target_epsilon=1.0))
