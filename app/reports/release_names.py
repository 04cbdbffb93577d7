"""Each ledger entry's release in words and by link, so an auditor reads the ledger without
the database.

A name uses only public facts of the release, fixed before it touched any record: its id and
kind, the models a monitoring run or a comparison measures, a search's public candidates and
the mean of its random number of runs, a federation's planned rounds. Never what the release
found: which candidate a search selected, how many runs it drew (its K is what
repeat-and-select keeps secret), or any result. Every job's facts come from one query for the
whole ledger.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.jobs import search as job_search
from app.jobs.models import COMPARISON, FEDERATED, MONITORING, PRIVACY_AUDIT, Job
from app.ledger.models import LedgerEntry
from app.monitoring.models import MonitoringRun
from app.reports.release_schemas import ReleaseKind, ReleaseRef


@dataclass(frozen=True)
class JobFacts:
    """What a name needs of a job: its kind, its stored request and payload, and for a
    monitoring run the run's own id and model (None for any other job)."""

    id: int
    kind: str
    training: dict[str, Any]
    payload: dict[str, Any] = field(default_factory=dict)
    run_id: int | None = None
    run_model_id: int | None = None


def job_facts(*, session: Session, entries: Iterable[LedgerEntry]) -> dict[int, JobFacts]:
    """The facts of every job charged by ``entries``' ledgers, by job id, in one query."""
    dataset_ids = {e.dataset_id for e in entries}
    if not dataset_ids:
        return {}
    rows = session.execute(
        select(Job.id, Job.kind, Job.training, Job.payload, MonitoringRun.id.label("run_id"),
               MonitoringRun.model_id)
        .join(LedgerEntry, LedgerEntry.job_id == Job.id)
        .outerjoin(MonitoringRun, MonitoringRun.job_id == Job.id)
        .where(LedgerEntry.dataset_id.in_(dataset_ids)))
    return {row.id: JobFacts(row.id, row.kind, row.training or {}, row.payload or {},
                             row.run_id, row.model_id)
            for row in rows}


def names(*, session: Session, entries: list[LedgerEntry]) -> dict[int, ReleaseRef]:
    """Each entry's release, by entry id."""
    facts = job_facts(session=session, entries=entries)
    return {e.id: name(e, facts) for e in entries}


def name(entry: LedgerEntry, facts: dict[int, JobFacts]) -> ReleaseRef:
    """The entry's release: its statistics release, or its job (every charged job has a row:
    jobs are never deleted)."""
    if entry.job_id is None:
        release_id = entry.statistics_release_id
        return ReleaseRef(kind=ReleaseKind.STATISTICS, words=f"statistics release {release_id}",
                          href=f"/v1/statistics/{release_id}")
    return job_name(facts[entry.job_id])


def job_name(job: JobFacts) -> ReleaseRef:
    """A job's release, by its kind."""
    report = f"/v1/jobs/{job.id}/privacy-report"
    if job.kind == MONITORING:
        return _monitoring(job)
    if job.kind == COMPARISON:
        asked = job.payload
        return ReleaseRef(
            kind=ReleaseKind.COMPARISON, href=f"/v1/comparisons/{job.id}",
            words=f"champion/challenger comparison {job.id} of models "
                  f"{asked.get('champion_id')} (champion) and {asked.get('challenger_id')} "
                  "(challenger)")
    if job.kind == FEDERATED:
        part = job.payload
        return ReleaseRef(
            kind=ReleaseKind.FEDERATION, href=report,
            words=f"federated training job {job.id}: this clinic's part in federation "
                  f"{part.get('id')} ({part.get('rounds')} rounds planned)")
    if job.kind == PRIVACY_AUDIT:
        return ReleaseRef(kind=ReleaseKind.AUDIT, words=f"privacy audit {job.id}",
                          href=f"/v1/audits/{job.id}")
    plan = job_search.stored_plan(job.training)
    if plan is None:
        return ReleaseRef(kind=ReleaseKind.TRAINING, words=f"training job {job.id}", href=report)
    return ReleaseRef(
        kind=ReleaseKind.SEARCH, href=report,
        words=f"hyper-parameter search {job.id} ({len(plan['candidates'])} candidates "
              f"planned, a random number of runs of mean {float(plan['mean_runs']):g}, the "
              "best released)")


def _monitoring(job: JobFacts) -> ReleaseRef:
    """A monitoring run by its own id (its job's when the run row is missing)."""
    model_id = job.run_model_id or job.payload.get("model_id")
    if job.run_id is None:
        return ReleaseRef(kind=ReleaseKind.MONITORING, href=f"/v1/jobs/{job.id}",
                          words=f"monitoring job {job.id} of model {model_id}")
    return ReleaseRef(kind=ReleaseKind.MONITORING, href=f"/v1/monitoring-runs/{job.run_id}",
                      words=f"monitoring run {job.run_id} of model {model_id}")
