"""The privacy-audit report: accounted epsilon (an upper bound) beside audited (a lower bound).

A response model (``app.reports.audit_schemas.AuditReport``); ``app.reports.audit_html``
renders the same object as a page. The accounted epsilon is rounded up and the audited one
down, so rounding can never make the gap look smaller than it is, nor invent an alarm.
"""

from typing import Any

from app.datasets.models import Dataset
from app.jobs.models import Job
from app.privacy.figures import PRIVACY_UNIT, epsilon_text, round_down
from app.privacy_audit import service
from app.reports.audit_schemas import AttackAUCs, AuditEpsilons, AuditLinks, AuditReport
from app.reports.schemas import ReportError

ATTACKS = ("loss", "lira")
MODELS = ("dp", "non_private")


def audited_text(value: float | None) -> str | None:
    """A lower bound for people: rounded down, never overstated."""
    return None if value is None else f"{round_down(value, 3):.3g}"


def _statement(eps: AuditEpsilons, *, job: int, status: str, alarm: bool) -> str:
    claim = (
        f"The accountant claims epsilon <= {eps.accounted_text} at delta {eps.delta:g} "
        f"for job {job}'s mechanism (an upper bound: no attack can do better)."
        if not eps.non_private
        else f"Job {job} is non-private (epsilon = infinity): no bound to check."
    )
    if eps.audited is None:
        return f"{claim} The audit has not finished ({status})."
    found = (
        f" The audit proves epsilon >= {eps.audited_text} at {eps.confidence:.0%} "
        "confidence (a lower bound, from one training run with canaries: Steinke, Nasr and "
        "Jagielski 2023)."
    )
    if alarm:
        verdict = (
            " The lower bound EXCEEDS the upper bound: the training leaks more than its "
            "accounting claims. This is a privacy bug; do not rely on this mechanism's "
            "guarantee until it is found and fixed."
        )
    elif eps.non_private:
        verdict = ""
    else:
        verdict = (
            " The lower bound is below the upper bound, as it must be when the implementation "
            "matches its accounting. The gap is expected: one-run audits with a few thousand "
            "canaries cannot prove large epsilons."
        )
    return claim + found + verdict


def attack_aucs(membership: dict[str, Any] | None) -> AttackAUCs:
    """ROC-AUC of each attack on each model (None until the audit has run)."""
    return AttackAUCs.model_validate({
        model: {
            attack: ((membership or {}).get(model) or {}).get(attack, {}).get("roc_auc")
            for attack in ATTACKS
        }
        for model in MODELS
    })


def audit_report(*, job: Job, dataset: Dataset, root_path: str = "") -> AuditReport:
    """Per audited job: both epsilons, the one-run audits, the attacks, and where it ran."""
    out = service.describe(job=job)
    metrics = job.metrics or {}
    accounted, audited = out.accounted_epsilon, out.audited_epsilon
    epsilon = AuditEpsilons(
        accounted=accounted,
        accounted_text=epsilon_text(accounted, non_private=accounted is None),
        accountant="prv",
        audited=audited,
        audited_text=audited_text(audited),
        audited_by=metrics.get("audited_by"),
        delta=job.delta,
        confidence=float(out.request.get("confidence", 0.95)),
        non_private=accounted is None,
    )
    return AuditReport(
        audit_id=job.id,
        audited_job_id=out.audited_job_id,
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        status=job.status,
        alarm=out.alarm,
        error=ReportError.model_validate(out.error) if out.error else None,
        privacy_unit=PRIVACY_UNIT,
        epsilon=epsilon,
        request=out.request,
        settings=metrics.get("settings"),
        one_run=metrics.get("one_run"),
        membership=metrics.get("membership"),
        attack_auc=attack_aucs(metrics.get("membership")),
        seconds=metrics.get("seconds"),
        ledger=service.LEDGER_NOTE,
        links=AuditLinks(
            audited_job_report=f"{root_path}/v1/jobs/{out.audited_job_id}/privacy-report",
            dataset_report=f"{root_path}/v1/datasets/{dataset.id}/privacy-report",
        ),
        statement=_statement(epsilon, job=out.audited_job_id, status=job.status,
                             alarm=out.alarm),
    )
