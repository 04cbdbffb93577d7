"""Privacy reports a privacy officer can hand on: per job and per dataset.

Both are response models (``app.reports.schemas``); ``app.reports.privacy_html`` renders the same
objects as pages, so the page can never say something the JSON does not. Infinite epsilons
(non-private training)
are never emitted as numbers (JSON has no Infinity): the numeric field is null, and an
``epsilon_text`` of ``"infinity"`` with ``non_private: true`` says what null means.
"""

import math
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.jobs import service as job_service
from app.jobs.models import SUCCEEDED, Job
from app.jobs.results import ServedResults
from app.ledger import spend as ledger_spend
from app.ledger.models import NON_PRIVATE, LedgerEntry
from app.privacy.accounting import finite_or_none
from app.privacy.figures import PRIVACY_UNIT, epsilon_text
from app.privacy.filter import CITATION
from app.privacy.terms import terms
from app.privacy_audit import service as privacy_audit_service
from app.reports import statistics_report
from app.reports.schemas import (
    Accountants,
    AuditSummary,
    Budget,
    Coverage,
    DatasetPrivacyReport,
    EpochEpsilon,
    EpsilonByAccountant,
    HeldOutMetrics,
    IntendedUse,
    JobPrivacyReport,
    LedgerEntryView,
    ModelCard,
    PrivacyTerms,
    Remaining,
    Spend,
    TimelinePointView,
    TrainingData,
)

REPORTED_ACCOUNTANT = "prv"
METRICS_NOTE = (
    "computed from one differentially private release on the evaluation part of the held-out "
    "rows (never used for training or calibration): noisy counts of rows and crises per fixed "
    "public score bin, overall and per subgroup, with Gaussian noise no costlier than the "
    "training (parallel composition, no extra spend). Every figure, interval included, is "
    "computed from those noisy counts alone, so it is covered by the guarantee; counts are "
    "estimates, and the intervals include the noise. They are exact only for a non-private "
    "job on a public dataset (marked exact)"
)
LEGACY_METRICS = (
    "held-out metrics stored before the evaluation was a DP release (exact, not covered)"
)


def evaluation_is_dp(metrics: dict[str, Any] | None) -> bool:
    """Whether the stored metrics are a DP release (or exact on public data): False for metrics
    an older worker computed exactly on private held-out rows, and before any metrics exist."""
    return isinstance((metrics or {}).get("release"), dict)


def calibration_text(calibration: dict[str, Any] | None) -> str:
    """The calibration step in words, or '' for a model stored before calibration existed."""
    if not calibration:
        return ""
    noise = calibration["noise_multiplier"]
    release = (
        f"with Gaussian noise (noise multiplier {noise:.4g}, L2 sensitivity sqrt(2))"
        if noise > 0 else "exactly (the training is non-private)"
    )
    return (
        f" Calibration: the probabilities were calibrated by Platt scaling (slope "
        f"{calibration['slope']:.3g}, intercept {calibration['intercept']:.3g}) fitted to the "
        f"number of calibration rows and of crises per bin of the model's score, released "
        f"{release}. The calibration rows are a per-record random part of the held-out rows, "
        "disjoint from the training rows and from the evaluation rows, and the release is no "
        "costlier than the training at every RDP order and at this delta, so the two compose in "
        "parallel: the guarantee below covers the calibrated model with no extra spend."
    )


def evaluation_text(metrics: dict[str, Any] | None) -> str:
    """The evaluation release in words, or '' before the job has metrics."""
    if not metrics:
        return ""
    release = metrics.get("release")
    if not isinstance(release, dict):
        return (" Evaluation: the held-out metrics were stored before the evaluation was a DP "
                "release; they were computed exactly and are not covered.")
    if release.get("exact"):
        return (" Evaluation: the held-out metrics are exact (noise multiplier 0: a non-private "
                "job on a public dataset).")
    return (
        " Evaluation: the held-out metrics are one Gaussian release on the evaluation rows "
        "(noisy counts of rows and crises per fixed public score bin, overall and per subgroup; "
        f"noise multiplier {release['noise_multiplier']:.4g}, L2 sensitivity "
        f"{release['l2_sensitivity']:.4g}); every metric is computed from those noisy counts "
        "(post-processing). Calibration and evaluation are DP releases on disjoint held-out "
        "parts, each no costlier than the training, composed in parallel with it: no extra "
        "spend."
    )


def _statement(job: Job, dataset: Dataset, planned: dict[str, float | None]) -> str:
    """The guarantee in words: unit, data, mechanism, accounting, scope, and its limits."""
    data = (
        f"Privacy unit: one record, which is one patient. Data: dataset {dataset.id} with "
        f"{dataset.n_rows} rows, of which {dataset.n_train} were used for training and "
        f"{dataset.n_holdout} held out."
    )
    legacy = bool(job.metrics) and not evaluation_is_dp(job.metrics)
    limits = (
        f"Not covered: {LEGACY_METRICS + ', and ' if legacy else ''}anything outside the trust "
        "boundary: the raw data store, the operators and the database, side channels such as "
        "timing, and the choice of the budget itself."
    )
    calibration = calibration_text((job.metrics or {}).get("calibration")) + evaluation_text(
        job.metrics)
    releases = "the calibration release" if legacy else "the calibration and evaluation releases"
    if job.non_private:
        return (
            f"Non-private training: epsilon = infinity. No noise was added to the gradients, so "
            f"the model carries no differential-privacy guarantee; this is allowed only because "
            f"dataset {dataset.id} is public. {data} Training: {job.steps} steps over "
            f"{job.epochs} epochs with noise multiplier 0.{calibration} {limits}"
        )
    status = (
        ""
        if job.status == SUCCEEDED
        else f" The job is {job.status}; the figures are for the full planned run, which bounds "
        "any part of it."
    )
    return (
        f"{data} Mechanism: DP-SGD. At every step each training record is included "
        f"independently with probability {job.sample_rate:.4g} (Poisson sampling; expected "
        f"batch size {job.sample_rate * dataset.n_train:.1f}), each record's whole gradient is "
        f"clipped to L2 norm {job.max_grad_norm:g}, and Gaussian noise with noise multiplier "
        f"{job.noise_multiplier:.4g} (standard deviation {job.noise_multiplier:.4g} x "
        f"{job.max_grad_norm:g}) is added; {job.steps} steps over {job.epochs} epochs."
        f"{calibration} Accounting: epsilon = {epsilon_text(planned['prv'])} at delta = "
        f"{job.delta:g} by the "
        "PLD accountant (dp-accounting's privacy loss distribution, the reported figure); "
        "the RDP accountant, which the dataset ledger's Rényi filter composes across jobs at "
        f"one fixed order, gives epsilon = {epsilon_text(planned['rdp'])}. "
        f"Guarantee: ({epsilon_text(planned['prv'])}, {job.delta:g})-differential privacy "
        f"for adding or removing one patient's record, covering the released model, every "
        f"checkpoint or intermediate model, and {releases} (anything computed from them alone "
        f"inherits it by post-processing).{status} {limits}"
    )


def _coverage(job: Job) -> Coverage:
    legacy = bool(job.metrics) and not evaluation_is_dp(job.metrics)
    not_covered = [
        *([LEGACY_METRICS] if legacy else []),
        "the raw data store (the training rows themselves)",
        "operators and the database (they can read the data)",
        "side channels such as training time or resource use",
        "who chose the budget, and why (a policy decision, not a computation)",
    ]
    if job.non_private:
        return Coverage(
            covers=[],
            does_not_cover=[
                "the model and its checkpoints (non-private training: epsilon = infinity)",
                *not_covered,
            ],
        )
    return Coverage(
        covers=[
            "the released model",
            "its probability calibration on the calibration rows (parallel composition)",
            "its held-out metrics: one noisy histogram release on the evaluation rows, every "
            "metric computed from it (parallel composition)",
            "every checkpoint and intermediate model of the run",
            "anything computed from the model alone, e.g. risk scores and explanations "
            "(post-processing)",
        ],
        does_not_cover=not_covered,
    )


def _training_data(dataset: Dataset) -> TrainingData:
    if dataset.source_kind == "synthetic":
        source = (
            "synthetic: the seed article's logistic crisis generator (its seed, which "
            "regenerates every row, is shown to admins and data stewards only); no real "
            "patient is in it"
        )
    else:
        source = f"uploaded table ({dataset.source_kind})"
    return TrainingData(
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        source=source,
        synthetic=dataset.source_kind == "synthetic",
        public=dataset.public,
        rows=dataset.n_rows,
        training_rows=dataset.n_train,
        holdout_rows=dataset.n_holdout,
        note="Only public facts about the data are reported; no statistic of the private "
        "training rows (such as their prevalence) is computed or shown.",
    )


def model_card(job: Job, dataset: Dataset) -> ModelCard:
    """Model-card fields: intended use, training data, metrics and caveats."""
    caveats = [
        "Differential privacy adds noise to training and lowers accuracy; compare the metrics "
        "with a non-private baseline before relying on the scores.",
        "Calibration is not guaranteed: probabilities may be off, more so for rare outcomes; "
        "check the Brier score and recalibrate on local data before setting risk bands.",
        "Performance in subgroups is not guaranteed: only the schema's subgroups (age bands, "
        "sex) are reported, from noisy counts, with wide intervals in small groups; ethnicity "
        "and diagnoses are not measured, and noise tends to hurt small subgroups most.",
        "Held-out metrics come from a finite sample (a few dozen positives) and from noisy "
        "counts: read the 95% intervals (they include the DP noise), not only the point "
        "estimates; a metric resting on too few noisy positives is not reported.",
        "The model sees six features only; crisis risk depends on much it does not see.",
        "The guarantee assumes one row per patient; a patient with several rows is protected "
        "less.",
    ]
    if dataset.source_kind == "synthetic":
        caveats.insert(
            0,
            "Trained on synthetic data: it learns the generator's assumptions, not a real "
            "population, and is not clinically validated (the generator's Bayes-optimal ROC-AUC "
            "is about 0.845, the ceiling for any model).",
        )
    if job.non_private:
        caveats.insert(0, "Trained without differential privacy (epsilon = infinity).")
    return ModelCard(
        intended_use=IntendedUse(
            purpose="Flag patients at elevated 30-day crisis risk for clinician review.",
            users="clinicians, as decision support inside their own assessment",
            decision_support_not_diagnosis=True,
            out_of_scope=[
                "diagnosis",
                "automated decisions (granting, denying or prioritising care without a "
                "clinician)",
                "populations unlike the training data",
            ],
        ),
        training_data=_training_data(dataset),
        metrics=HeldOutMetrics(values=served_results(job.metrics), note=METRICS_NOTE),
        caveats=caveats,
    )


_SERVED_RESULTS: TypeAdapter[ServedResults] = TypeAdapter(ServedResults)


def served_results(stored: dict[str, Any] | None) -> ServedResults:
    """A job's stored result as its typed model; None when there is none, or when it matches no
    model (an untyped legacy result is withheld, as the response field itself would)."""
    return _SERVED_RESULTS.validate_python(stored)


def job_report(*, session: Session, job: Job, dataset: Dataset) -> JobPrivacyReport:
    """Mechanism, sampling, noise, clipping, steps, delta, epsilon by accountant, per epoch."""
    planned = job_service.planned_epsilon(job)
    steps_per_epoch = job.steps // job.epochs if job.epochs else 0
    return JobPrivacyReport(
        job_id=job.id,
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        status=job.status,
        privacy_unit=PRIVACY_UNIT,
        dataset_rows=dataset.n_rows,
        training_rows=dataset.n_train,
        holdout_rows=dataset.n_holdout,
        mechanism="non-private" if job.non_private else "DP-SGD (Poisson-subsampled Gaussian)",
        non_private=job.non_private,
        sampling="poisson",
        sample_rate=job.sample_rate,
        expected_batch_size=job.sample_rate * dataset.n_train,
        noise_multiplier=job.noise_multiplier,
        clip_norm=job.max_grad_norm,
        clipping="per-sample, whole gradient (all parameters together)",
        steps=job.steps,
        steps_per_epoch=steps_per_epoch,
        epochs=job.epochs,
        epochs_completed=job.progress_epoch,
        delta=job.delta,
        target_epsilon=job.target_epsilon,
        epsilon=EpsilonByAccountant.model_validate(planned),
        epsilon_text=epsilon_text(planned[REPORTED_ACCOUNTANT], non_private=job.non_private),
        accountants=Accountants(
            reported=REPORTED_ACCOUNTANT, composition=ledger_spend.COMPOSITION_ACCOUNTANT
        ),
        epsilon_spent=job.epsilon_spent,
        epsilon_per_epoch=[EpochEpsilon.model_validate(e) for e in job.epsilon_per_epoch],
        metrics=served_results(job.metrics),
        metrics_note=METRICS_NOTE,
        statement=_statement(job, dataset, planned),
        terms=PrivacyTerms.model_validate(terms(dataset.filter_order)),
        coverage=_coverage(job),
        model_card=model_card(job, dataset),
    )


def entry_view(entry: LedgerEntry) -> LedgerEntryView:
    """The entry's own columns, with what the report derives from them."""
    non_private = entry.mechanism == NON_PRIVATE
    return LedgerEntryView.from_row(
        entry,
        non_private=non_private,
        remainder_released=entry.released and bool(entry.committed_steps),
        epsilon=EpsilonByAccountant(rdp=entry.epsilon_rdp, pld=entry.epsilon_prv,
                                    prv=entry.epsilon_prv),  # prv: pld's deprecated alias
        epsilon_text=epsilon_text(entry.epsilon_rdp, non_private=non_private),
    )


def _timeline_view(point: ledger_spend.TimelinePoint) -> TimelinePointView:
    return TimelinePointView.from_row(
        point,
        entry_epsilon=finite_or_none(point.entry_epsilon),
        composed_epsilon=finite_or_none(point.composed_epsilon),
        naive_epsilon=finite_or_none(point.naive_epsilon),
        non_private=math.isinf(point.entry_epsilon),
        composed_epsilon_text=epsilon_text(point.composed_epsilon),
    )


def _composition(dataset: Dataset) -> str:
    if dataset.budget_epsilon is None:
        return ("no filter (public dataset): Rényi DP at the best order of the grid, for "
                "information only")
    return (f"Rényi filter at the fixed order {dataset.filter_order:g} ({CITATION}); a single "
            "release at its own tight epsilon when that is smaller")


def _spent(spend: ledger_spend.Spend, dataset: Dataset) -> Spend:
    composed, naive = finite_or_none(spend.composed_epsilon), finite_or_none(spend.naive_epsilon)
    return Spend(
        epsilon=composed,
        epsilon_text=epsilon_text(spend.composed_epsilon),
        non_private=math.isinf(spend.composed_epsilon),
        composition=_composition(dataset),
        naive_sum_epsilon=naive,
        naive_sum_epsilon_text=epsilon_text(spend.naive_epsilon),
        saved_by_composition_epsilon=(
            None if composed is None or naive is None else max(naive - composed, 0.0)
        ),
        accountant=ledger_spend.COMPOSITION_ACCOUNTANT,
    )


def dataset_report(*, session: Session, dataset: Dataset) -> DatasetPrivacyReport:
    """Budget, composed spend (RDP), the naive sum for comparison, remaining, all entries
    (jobs' and statistics releases'), and the statistics releases."""
    entries = ledger_spend.list_entries(session=session, dataset_id=dataset.id)
    timeline = ledger_spend.timeline_of(dataset, entries)
    spend = ledger_spend.spend_of(dataset, entries)
    audits = privacy_audit_service.summaries(session=session, dataset_id=dataset.id)
    return DatasetPrivacyReport(
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        public=dataset.public,
        privacy_unit=PRIVACY_UNIT,
        terms=PrivacyTerms.model_validate(terms(dataset.filter_order)),
        budget=Budget(
            epsilon=dataset.budget_epsilon,
            delta=dataset.budget_delta,
            limited=dataset.budget_epsilon is not None,
        ),
        spent=_spent(spend, dataset),
        remaining=Remaining(epsilon=spend.remaining_epsilon),
        entries=[entry_view(e) for e in entries],
        timeline=[_timeline_view(p) for p in timeline],
        statistics_releases=statistics_report.summaries(session=session, dataset_id=dataset.id),
        # Empirical checks of the accounting (public datasets only; they charge nothing).
        privacy_audits=[AuditSummary.model_validate(a) for a in audits],
    )
