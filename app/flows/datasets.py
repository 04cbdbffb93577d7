"""A dataset's steps that cross domains: each change with its audit event in one transaction,
the erasure with the statistics cache, and the dataset's privacy report.

The routes (``app.api.datasets``) call one of these and return; an upload's steps are
``app.flows.upload``.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.datasets import union, uploads
from app.datasets.models import Dataset
from app.datasets.schemas import DatasetCreate, PrivacyBudget
from app.monitoring import service as monitoring_service
from app.reports import privacy_report as reports
from app.reports.schemas import DatasetPrivacyReport
from app.statistics import cohort


def register(*, session: Session, request: DatasetCreate, principal: Principal) -> int:
    """Create the dataset and its audit event in one transaction; returns its id (an
    idempotent replay, ``app.core.idempotency``, calls neither).

    A follow-up (``request.follow_up``) takes the model's declared schema when it sends none,
    and must declare exactly that schema when it does (``monitoring_service.follow_up_request``).
    """
    if request.follow_up is not None:
        request = monitoring_service.follow_up_request(session=session, request=request)
    dataset = dataset_service.create(session=session, request=request)
    audit.record(
        session=session, principal=principal, action=Action.DATASET_REGISTERED,
        target=f"dataset/{dataset.id}",
        detail={"name": dataset.name, "n_rows": dataset.n_rows,
                "budget": {"epsilon": dataset.budget_epsilon, "delta": dataset.budget_delta}},
    )
    return dataset.id


def withdraw(*, session: Session, dataset_id: int, principal: Principal) -> None:
    """Delete a registration that never received rows, and record who did.

    Raises:
        DatasetNotFound; a conflict (409) once it has or had rows (``dataset_service.withdraw``).
    """
    dataset_service.withdraw(session=session, dataset_id=dataset_id)
    audit.record(session=session, principal=principal, action=Action.DATASET_WITHDRAWN,
                 target=f"dataset/{dataset_id}", detail={})


def erase_data(*, session: Session, dataset_id: int, principal: Principal) -> Dataset:
    """Erase the rows and their per-record secrets (the ledger, models and reports stay),
    and those of every union that holds them (``union.erase_with``), drop this process's
    cached copies, and record who erased them.

    Raises:
        DatasetNotFound.
    """
    dataset = uploads.erase_data(
        session=session, dataset=dataset_service.get(session=session, dataset_id=dataset_id))
    cohort.forget(dataset.id)  # no copy of the rows stays in this process's statistics cache
    unions = union.erase_with(session=session, member=dataset)  # their rows were its rows
    for erased in unions:
        cohort.forget(erased.id)
    audit.record(session=session, principal=principal, action=Action.DATA_ERASED,
                 target=f"dataset/{dataset.id}",
                 detail={"state": dataset.state,
                         **({"unions_erased": [u.id for u in unions]} if unions else {})})
    return dataset


def change_budget(*, session: Session, dataset_id: int, budget: PrivacyBudget,
                  principal: Principal) -> Dataset:
    """Set a new budget and record the change (from, to) in the audit log.

    Raises:
        DatasetNotFound; as ``dataset_service.change_budget`` (409 below what is spent or
        reserved, InvalidRequest for a delta above 1/(10 n_rows)).
    """
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    before = {"epsilon": dataset.budget_epsilon, "delta": dataset.budget_delta}
    dataset_service.change_budget(session=session, dataset=dataset, budget=budget)
    audit.record(session=session, principal=principal, action=Action.BUDGET_CHANGED,
                 target=f"dataset/{dataset.id}",
                 detail={"from": before, "to": budget.model_dump(mode="json")})
    return dataset


def privacy_report(*, session: Session, dataset_id: int,
                   principal: Principal) -> DatasetPrivacyReport:
    """The dataset's budget, composed spend, remaining budget, ledger entries and per-patient
    budget (its blocks as the principal's role may read them).

    Raises:
        DatasetNotFound.
    """
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    return reports.dataset_report(session=session, dataset=dataset, role=principal.role)
