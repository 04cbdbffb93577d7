"""``privacy_audit``: an audit of the DP-SGD mechanism on public synthetic data (details at
``/v1/audits/{id}``); it stores the audit's results, which the job view serves."""

from app.jobs.kinds.base import JobKind
from app.jobs.results import AuditResults

PRIVACY_AUDIT = JobKind("privacy_audit", order=1, results=AuditResults)
