"""``privacy_audit``: an audit of the DP-SGD mechanism (``worker.privacy_audit.job``), its
payload the audited training spec and the audit's request (``AuditPayload``)."""

from app.jobs.kinds.privacy_audit import PRIVACY_AUDIT
from worker.handlers import task_handler
from worker.privacy_audit.job import parse_audit, run_audit_job

task_handler(PRIVACY_AUDIT, parse=parse_audit)(run_audit_job)
