"""The audit log: who did what, and when, written in the same transaction as the action.

An event is added to the caller's session, so it commits with the job, budget or key it
describes and rolls back with it: the log never claims an action that did not happen. Details
are small JSON objects of ids and counts. Scoring records only how many patients were scored,
never a feature value (docs/privacy.md: patient features are never logged); as scoring writes
nothing else, its event has a group commit of its own, done before the answer leaves
(``app.auth.scoring_log``).
"""

from enum import StrEnum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.auth.models import AuditEvent
from app.auth.principal import Principal
from app.auth.scoring_log import scoring_log


class Action(StrEnum):
    """What an audit event records; the values are what ``GET /v1/audit-log?action=`` takes."""

    DATASET_REGISTERED = "dataset.registered"
    DATA_UPLOADED = "dataset.data_uploaded"
    DATA_ERASED = "dataset.data_erased"
    DATASET_WITHDRAWN = "dataset.withdrawn"
    PATIENT_IDS_DECLARED = "dataset.patient_ids_declared"
    BUDGET_CHANGED = "budget.changed"
    JOB_SUBMITTED = "job.submitted"
    JOB_CANCELLED = "job.cancelled"
    FEDERATION_DECLARED = "federation.declared"
    FEDERATION_JOINED = "federation.joined"
    MODEL_ACTIVATED = "model.activated"
    MODEL_ROLLED_BACK = "model.rolled_back"
    BAND_THRESHOLDS_CHANGED = "model.band_thresholds_changed"
    LEDGER_VERIFIED = "ledger.verified"
    PATIENT_BUDGET_CHANGED = "patient_budget.changed"
    PATIENT_BUDGET_VERIFIED = "patient_budget.verified"
    STATISTICS_RELEASED = "statistics.released"
    KEY_CREATED = "key.created"
    KEY_REVOKED = "key.revoked"
    RISK_SCORED = "risk.scored"


def record(
    *, session: Session, principal: Principal, action: Action, target: str | None = None,
    detail: dict[str, Any] | None = None,
) -> AuditEvent:
    """Add one event to ``session`` (committed by the caller, with the action itself).

    Args:
        target: what was acted on, as ``kind/id`` (``"job/7"``, ``"model/2"``).
        detail: ids, counts and parameters only; never patient features.
    """
    event = AuditEvent(
        api_key_id=principal.key_id, actor=principal.name, role=principal.role,
        action=str(action), target=target, detail=detail or {}, request_id=principal.request_id,
    )
    session.add(event)
    return event


def record_scoring(*, principal: Principal, endpoint: str, patients: int, model_id: int) -> None:
    """A scoring call: the endpoint, the model and the number of patients, nothing else.

    Returns once the event is committed (a group commit shared with concurrent calls,
    ``app.auth.scoring_log``): scoring writes nothing else to commit it with, and its answer
    must not leave before its event is durable. Call it from a worker thread: it blocks.

    Raises:
        AuditUnavailable: the event could not be committed (503; answer no score).
    """
    scoring_log.write(
        api_key_id=principal.key_id, actor=principal.name, role=principal.role,
        action=str(Action.RISK_SCORED), target=f"model/{model_id}",
        detail={"endpoint": endpoint, "patients": patients}, request_id=principal.request_id,
    )


def list_page(
    *, session: Session, limit: int, offset: int, action: Action | None = None,
    actor: str | None = None,
) -> tuple[list[AuditEvent], int]:
    """Events, newest first, optionally of one action and/or one actor (a scoring call's
    event is committed before it answers, so every answered call is here)."""
    query = select(AuditEvent)
    if action is not None:
        query = query.where(AuditEvent.action == str(action))
    if actor is not None:
        query = query.where(AuditEvent.actor == actor)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(
        query.order_by(AuditEvent.id.desc()).limit(limit).offset(offset)
    ).all()
    return list(rows), total



# Exact facts about a table's rows that an upload's event keeps (counts of imputed values, the
# SHA-256 of the clinic's file, how many of its patients earlier datasets hold:
# app.datasets.patients.patient_index.Overlap, with the earlier dataset whose rows its rows equal,
# if any): readable by those who hold the tables, withheld from others.
INTAKE_FACTS = frozenset({"imputed", "table_sha256", "patients"})
TABLE_HOLDERS = frozenset({"admin", "data_steward"})


def detail_for(event: AuditEvent, role: str | None) -> dict[str, Any]:
    """The event's detail as ``role`` may read it: intake facts only for the tables' holders
    (others see which members were withheld, not their values)."""
    detail = dict(event.detail or {})
    if role in TABLE_HOLDERS:
        return detail
    withheld = sorted(INTAKE_FACTS & detail.keys())
    for key in withheld:
        del detail[key]
    if withheld:
        detail["withheld"] = withheld
    return detail
