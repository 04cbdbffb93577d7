"""Privacy reports a privacy officer can hand on: per job and per dataset.

Both are response models (``app.reports.schemas``); ``app.reports.privacy_html`` renders the same
objects as pages, so the page can never say something the JSON does not. Infinite epsilons
(non-private training)
are never emitted as numbers (JSON has no Infinity): the numeric field is null, and an
``epsilon_text`` of ``"infinity"`` with ``non_private: true`` says what null means.
"""

import math
from typing import Any

from sqlalchemy.orm import Session

from app.datasets.models import Dataset
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.dataset_schema import DatasetSchema
from app.jobs import search as job_search
from app.jobs import service as job_service
from app.jobs.models import SUCCEEDED, Job
from app.ledger import spend as ledger_spend
from app.ledger.models import LedgerEntry
from app.privacy.accounting import finite_or_none
from app.privacy.figures import PRIVACY_UNIT, epsilon_text
from app.privacy.filter import CITATION
from app.privacy.terms import terms
from app.privacy_audit import service as privacy_audit_service
from app.registry import service as registry_service
from app.reports import (
    held_out_words,
    ledger_views,
    ledger_words,
    model_card,
    patient_report,
    statistics_report,
)
from app.reports.schemas import (
    Accountants,
    AuditSummary,
    Budget,
    Coverage,
    DatasetPrivacyReport,
    EpochEpsilon,
    EpsilonByAccountant,
    JobPrivacyReport,
    PrivacyTerms,
    Remaining,
    Spend,
)

REPORTED_ACCOUNTANT = "prv"
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
    if held_out_words.withheld(calibration):
        return held_out_words.WITHHELD_CALIBRATION_TEXT
    noise = calibration["noise_multiplier"]
    release = (
        f"with Gaussian noise (noise multiplier {noise:.4g}, L2 sensitivity sqrt(2))"
        if noise > 0 else "exactly (the training is non-private)"
    )
    return (
        f" Calibration: the probabilities were calibrated by Platt scaling (slope "
        f"{calibration['slope']:.3g}, intercept {calibration['intercept']:.3g}) fitted to the "
        f"number of calibration rows and of positives per bin of the model's score, released "
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
        "(noisy counts of rows and positives per fixed public score bin, overall and per "
        f"subgroup; noise multiplier {release['noise_multiplier']:.4g}, L2 sensitivity "
        f"{release['l2_sensitivity']:.4g}); every metric is computed from those noisy counts "
        f"(post-processing). {held_out_words.parallel_sentence(metrics)}"
    )


def _statement(job: Job, dataset: Dataset, planned: dict[str, float | None]) -> str:
    """The guarantee in words: unit, data, mechanism, accounting, scope, and its limits."""
    plan = job.dp_sgd_plan
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
        job.metrics) + held_out_words.warnings_text(job.metrics)
    releases = "the calibration release" if legacy else "the calibration and evaluation releases"
    if held_out_words.calibration_withheld(job.metrics):
        releases = "the evaluation release"
    if job.non_private:
        return (
            f"Non-private training: epsilon = infinity. No noise was added to the gradients, so "
            f"the model carries no differential-privacy guarantee; this is allowed only because "
            f"dataset {dataset.id} is public. {data} Training: {plan.steps} steps over "
            f"{plan.epochs} epochs with noise multiplier 0.{calibration} {limits}"
        )
    status = (
        ""
        if job.status == SUCCEEDED
        else f" The job is {job.status}; the figures are for the full planned run, which bounds "
        "any part of it."
    )
    return (
        f"{data} Mechanism: DP-SGD. At every step each training record is included "
        f"independently with probability {plan.sample_rate:.4g} (Poisson sampling; expected "
        f"batch size {plan.sample_rate * dataset.n_train:.1f}), each record's whole gradient is "
        f"clipped to L2 norm {plan.max_grad_norm:g}, and Gaussian noise with noise multiplier "
        f"{job.noise_multiplier:.4g} (standard deviation {job.noise_multiplier:.4g} x "
        f"{plan.max_grad_norm:g}) is added; {plan.steps} steps over {plan.epochs} epochs."
        f"{_search_text(job)}{calibration} Accounting: epsilon = "
        f"{epsilon_text(planned['prv'])} at delta = {job.delta:g} by the "
        f"{PLD_ACCOUNTING if _search_plan(job) is None else SEARCH_ACCOUNTING}"
        f"{_admission_text(dataset)} "
        f"Guarantee: ({epsilon_text(planned['prv'])}, {job.delta:g})-differential privacy "
        f"for adding or removing one patient's record, covering the released model, every "
        f"checkpoint or intermediate model, and {releases} (anything computed from them alone "
        f"inherits it by post-processing).{status} {limits}"
    )


PLD_ACCOUNTING = "PLD accountant (dp-accounting's privacy loss distribution): the headline figure."
SEARCH_ACCOUNTING = ("RDP accountant (dp-accounting's analysis of repeat-and-select; its "
                     "privacy loss distribution has none): the headline figure.")


def _search_text(job: Job) -> str:
    """A search job's runs in words (empty for one run)."""
    plan = _search_plan(job)
    if plan is None:
        return ""
    return (f" Hyper-parameter search: a random number of such runs ({plan['runs']}, mean "
            f"{plan['mean_runs']:g}), each on a candidate drawn uniformly from "
            f"{len(plan['candidates'])} public candidates (a candidate may set its own clip "
            "norm: the noise scales with it) and scored by its own calibration release; only "
            "the best run is released (repeat-and-select, Papernot and Steinke 2022), and the "
            "number of runs is not. The worker executes "
            f"{plan.get('executed_runs', 'a fixed number of')} runs whatever that number K "
            "and keeps the best of the first K, so the job's timing does not tell K; the "
            "chance that K exceeds them is covered by part of delta (search.tail_delta).")


def _admission_text(dataset: Dataset) -> str:
    """How the ledger admits the job, and why its figure differs from the headline one."""
    if dataset.budget_epsilon is None:
        return " The dataset is public without a budget: no filter admits the job."
    return (" The dataset's Rényi filter admits the job by its RDP at the filter's one fixed "
            "order, which it adds up across jobs and converts to epsilon once at the budget "
            "delta, a looser account than this figure.")


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
            *([] if held_out_words.calibration_withheld(job.metrics) else
              ["its probability calibration on the calibration rows (parallel composition)"]),
            "its held-out metrics: one noisy histogram release on the evaluation rows, every "
            "metric computed from it (parallel composition)",
            "every checkpoint and intermediate model of the run",
            "anything computed from the model alone, e.g. risk scores and explanations "
            "(post-processing)",
        ],
        does_not_cover=not_covered,
    )


def _trained_schema(*, session: Session, job: Job, dataset: Dataset) -> DatasetSchema:
    """The schema the job's model was trained on (its model's, once there is one; else the
    dataset's; a registration from before schemas is the built-in generator's)."""
    model_id = registry_service.model_id_for_job(session=session, job_id=job.id)
    if model_id is not None:
        return registry_service.schema_of(registry_service.get(session=session,
                                                               model_id=model_id))
    if dataset.schema_json is None:
        return BUILT_IN_SCHEMA
    return DatasetSchema.model_validate(dataset.schema_json)


def _search_plan(job: Job) -> dict[str, Any] | None:
    """The job's stored search plan (None: one run, or a kind that trains nothing)."""
    return job_search.stored_plan(job.training_request)


def job_report(*, session: Session, job: Job, dataset: Dataset) -> JobPrivacyReport:
    """Mechanism, sampling, noise, clipping, steps, delta, epsilon by accountant, per epoch."""
    planned, plan = job_service.planned_epsilon(job), job.dp_sgd_plan
    steps_per_epoch = plan.steps // plan.epochs if plan.epochs else 0
    search_view = job_search.view(training=job.training_request,
                                  noise_multiplier=job.noise_multiplier,
                                  sample_rate=plan.sample_rate, steps=plan.steps, delta=job.delta)
    return JobPrivacyReport(
        job_id=job.id,
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        status=job.status,
        privacy_unit=PRIVACY_UNIT,
        dataset_rows=dataset.n_rows,
        training_rows=dataset.n_train,
        holdout_rows=dataset.n_holdout,
        rows_erased_at=dataset.data_erased_at,
        mechanism="non-private" if job.non_private else "DP-SGD (Poisson-subsampled Gaussian)"
        if search_view is None else SEARCH_MECHANISM,
        non_private=job.non_private,
        sampling="poisson",
        sample_rate=plan.sample_rate,
        expected_batch_size=plan.sample_rate * dataset.n_train,
        noise_multiplier=job.noise_multiplier,
        clip_norm=plan.max_grad_norm,
        clipping="per-sample, whole gradient (all parameters together)",
        steps=plan.steps,
        steps_per_epoch=steps_per_epoch,
        epochs=plan.epochs,
        epochs_completed=job.progress_epoch,
        delta=job.delta,
        target_epsilon=job.target_epsilon,
        epsilon=EpsilonByAccountant.model_validate(planned),
        epsilon_text=epsilon_text(planned[REPORTED_ACCOUNTANT], non_private=job.non_private),
        filter_rdp=ledger_words.job_filter_rdp(session=session, job_id=job.id, dataset=dataset),
        accountants=Accountants(
            reported=REPORTED_ACCOUNTANT, composition=ledger_spend.COMPOSITION_ACCOUNTANT
        ),
        epsilon_spent=job.epsilon_spent,
        epsilon_per_epoch=[EpochEpsilon.model_validate(e) for e in job.epsilon_per_epoch],
        search=search_view,
        metrics=model_card.served_results(job.metrics),
        metrics_note=model_card.METRICS_NOTE,
        statement=_statement(job, dataset, planned),
        terms=PrivacyTerms.model_validate(terms(dataset.filter_order)),
        coverage=_coverage(job),
        model_card=model_card.build(job, dataset,
                              _trained_schema(session=session, job=job, dataset=dataset)),
    )


SEARCH_MECHANISM = ("hyper-parameter search: a random number of DP-SGD runs (Poisson-subsampled "
                    "Gaussian), the best one released (repeat-and-select, Papernot and Steinke "
                    "2022)")


def _composition(dataset: Dataset) -> str:
    if dataset.budget_epsilon is None:
        return ("no filter (public dataset): Rényi DP at the best order of the grid, for "
                "information only")
    return (f"Rényi filter at the fixed order {dataset.filter_order:g} ({CITATION}); a single "
            "release at its own tight epsilon when that is smaller")


def _spent(spend: ledger_spend.Spend, dataset: Dataset, entries: list[LedgerEntry]) -> Spend:
    composed, naive = finite_or_none(spend.composed_epsilon), finite_or_none(spend.naive_epsilon)
    charged = ledger_spend.charged(entries)
    guard = ledger_spend.filter_of(dataset)
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
        composition_cost_epsilon=(
            None if composed is None or naive is None else max(composed - naive, 0.0)
        ),
        composition_note=ledger_words.composition_note(
            composed=spend.composed_epsilon, naive=spend.naive_epsilon, releases=len(charged),
            filtered=guard is not None),
        filter_rdp=(None if guard is None
                    else finite_or_none(ledger_spend.spent_rdp(charged, guard.order))),
        filter_rdp_bound=None if guard is None else guard.rdp_bound,
        figures_note=ledger_words.figures_note(None if guard is None else guard.order),
        accountant=ledger_spend.COMPOSITION_ACCOUNTANT,
    )


def dataset_report(*, session: Session, dataset: Dataset,
                   role: str | None = None) -> DatasetPrivacyReport:
    """Budget, composed spend (RDP), the naive sum for comparison, remaining, all entries
    (jobs' and statistics releases'), the statistics releases, and the per-patient budget
    (its blocks as ``role`` may read them: ``patient_report``; None: none)."""
    entries = ledger_spend.list_entries(session=session, dataset_id=dataset.id)
    timeline = ledger_spend.timeline_of(dataset, entries)
    spend = ledger_spend.spend_of(dataset, entries)
    audits = privacy_audit_service.summaries(session=session, dataset_id=dataset.id)
    listed, points = ledger_views.views(session=session, entries=entries, timeline=timeline,
                                        guard=ledger_spend.filter_of(dataset))
    return DatasetPrivacyReport(
        dataset_id=dataset.id,
        dataset_name=dataset.name,
        public=dataset.public,
        privacy_unit=PRIVACY_UNIT,
        rows_erased_at=dataset.data_erased_at,
        erasure=ledger_words.dataset_erasure(dataset.data_erased_at),
        terms=PrivacyTerms.model_validate(terms(dataset.filter_order)),
        budget=Budget(
            epsilon=dataset.budget_epsilon,
            delta=dataset.budget_delta,
            limited=dataset.budget_epsilon is not None,
        ),
        spent=_spent(spend, dataset, entries),
        remaining=Remaining(epsilon=spend.remaining_epsilon),
        entries=listed,
        timeline=points,
        statistics_releases=statistics_report.summaries(session=session, dataset_id=dataset.id),
        # Empirical checks of the accounting (public datasets only; they charge nothing).
        privacy_audits=[AuditSummary.model_validate(a) for a in audits],
        patient_budget=patient_report.patient_budget(session=session, dataset=dataset,
                                                     role=role),
    )
