"""Imports every table so ``Base.metadata`` is complete (Alembic and tests use this)."""

from app.auth.models import ApiKey, AuditEvent
from app.cdshooks.models import CdsFeedback, CdsTokenSeen
from app.core.database import Base
from app.core.idempotency import IdempotencyRecord
from app.datasets.models import Dataset, Upload
from app.federation.models import Federation
from app.jobs.models import Job
from app.ledger.models import LedgerEntry, LedgerEvent
from app.ledger.space_chain import PatientSpaceEvent
from app.ledger.spaces import PatientBlock, PatientSpace
from app.monitoring.models import MonitoringRun
from app.registry.models import TrainedModel
from app.statistics.models import StatisticsRelease

__all__ = [
    "ApiKey", "AuditEvent", "Base", "CdsFeedback", "CdsTokenSeen", "Dataset", "Federation",
    "MonitoringRun", "Upload",
    "IdempotencyRecord", "Job", "LedgerEntry", "LedgerEvent", "PatientBlock", "PatientSpace",
    "PatientSpaceEvent", "StatisticsRelease", "TrainedModel",
]
