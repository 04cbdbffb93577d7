"""Job rules: plan the DP mechanism, admit through the ledger, cancel."""

import math
from typing import Any

from dp_accounting import DpEvent
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.core.database import affected_rows
from app.core.errors import Conflict, InvalidRequest, NotFound
from app.core.time import utcnow
from app.datasets.models import AWAITING_DATA, READY, Dataset
from app.datasets.rules import max_delta
from app.datasets.schema import labels
from app.families import DEFAULT_FAMILY, create_family
from app.jobs import fitted, kinds, notify, recipe, search, size_floor
from app.jobs.models import CANCELLED, FINISHED, QUEUED, RUNNING, Job
from app.jobs.schemas import (
    FULL_BATCH_EPOCHS,
    MINI_BATCH_EPOCHS,
    JobCreate,
    TrainingConfig,
)
from app.ledger import service as ledger_service
from app.ledger.release import Scope
from app.privacy import accounting, noise


class JobNotFound(NotFound):
    kind, title = "job-not-found", "Job not found"


# A job's noisy steps, all epochs together: what a worker finishes in minutes, not days. It
# also bounds what planning and accounting cost (see accounting.MAX_PRV_DOMAIN_POINTS).
MAX_TOTAL_STEPS = 1_000_000


def _plan_sampling(dataset: Dataset, batch_size: int, epochs: int) -> tuple[float, int]:
    """Poisson sample rate and total steps, computed exactly as Opacus' DPDataLoader does.

    Raises:
        InvalidRequest: the batch is larger than the training rows, or the plan has more than
            MAX_TOTAL_STEPS steps (the error names the epochs that fit at this batch size).
    """
    if batch_size > dataset.n_train:
        raise InvalidRequest(
            f"batch_size {batch_size} exceeds the {dataset.n_train} training rows",
            field="training.batch_size",
            allowed=f"[8, {dataset.n_train}]",
        )
    sample_rate, steps_per_epoch = accounting.poisson_plan(dataset.n_train, batch_size)
    if epochs * steps_per_epoch > MAX_TOTAL_STEPS:
        most = MAX_TOTAL_STEPS // steps_per_epoch
        raise InvalidRequest(
            f"{epochs} epochs of {steps_per_epoch} steps (batch size {batch_size}) make "
            f"{epochs * steps_per_epoch} steps, above the {MAX_TOTAL_STEPS} a job may take; "
            "use fewer epochs or a larger batch",
            field="training.epochs",
            allowed=f"[1, {most}]" if most >= 1 else f"none at batch size {batch_size}",
        )
    return sample_rate, epochs * steps_per_epoch


def _resolve_training(training: TrainingConfig, dataset: Dataset) -> TrainingConfig:
    """Fill the size-dependent defaults (a public function of n_train, never of the data) and
    the optimizer's learning rate."""
    batch_size = training.batch_size if training.batch_size is not None else dataset.n_train
    epochs = training.epochs
    if epochs is None:
        epochs = FULL_BATCH_EPOCHS if batch_size >= dataset.n_train else MINI_BATCH_EPOCHS
    learning_rate = training.learning_rate
    if learning_rate is None:
        learning_rate = recipe.default_learning_rate(training.optimizer, training.model)
    return training.model_copy(update={"batch_size": batch_size, "epochs": epochs,
                                       "learning_rate": learning_rate})


def resolve_delta(dataset: Dataset, requested: float | None) -> float:
    limit = max_delta(dataset.n_rows)
    delta = requested if requested is not None else dataset.budget_delta
    if delta is None:
        delta = min(1e-5, limit)
    if delta > limit:
        raise InvalidRequest(
            f"delta must be at most 1/(10 n_rows) = {limit:.3g} for this dataset: at delta "
            f"near 1/n_rows, publishing one random record in full meets the guarantee",
            field="privacy.delta",
            allowed=f"(0, {limit:.6g}]",
        )
    return delta


def _resolve_noise(
    request: JobCreate, dataset: Dataset, delta: float, sample_rate: float, steps: int
) -> float:
    privacy = request.privacy
    if privacy.noise_multiplier is not None:
        sigma = privacy.noise_multiplier
        if sigma == 0.0 and not dataset.public:
            raise InvalidRequest(
                "non-private training (noise_multiplier 0) spends an infinite budget and is "
                "only allowed on public datasets",
                field="privacy.noise_multiplier",
                allowed=f"0 on public datasets, else [{accounting.MIN_NOISE_MULTIPLIER}, "
                f"{accounting.MAX_NOISE_MULTIPLIER}]",
            )
        if sigma == 0.0 and request.search is not None:
            raise InvalidRequest(
                "a search selects among DP runs: its bound needs each run to be private",
                field="privacy.noise_multiplier",
                allowed=f"[{accounting.MIN_NOISE_MULTIPLIER}, {accounting.MAX_NOISE_MULTIPLIER}]",
            )
        if 0.0 < sigma < accounting.MIN_NOISE_MULTIPLIER:
            raise InvalidRequest(
                f"noise_multiplier below {accounting.MIN_NOISE_MULTIPLIER} gives no meaningful "
                "guarantee",
                field="privacy.noise_multiplier",
                allowed=f"[{accounting.MIN_NOISE_MULTIPLIER}, {accounting.MAX_NOISE_MULTIPLIER}]",
            )
        return sigma
    assert privacy.target_epsilon is not None
    if request.search is not None:  # the whole search meets the target (app.jobs.search)
        return search.noise_for_target(
            search=request.search, model=request.training.model,
            target_epsilon=privacy.target_epsilon, delta=delta, sample_rate=sample_rate,
            steps=steps)
    return noise.noise_for_target(
        target_epsilon=privacy.target_epsilon,
        delta=delta,
        sample_rate=sample_rate,
        steps=steps,
        accountant="prv",
    )


def _unreachable(request: JobCreate, delta: float, sample_rate: float, steps: int
                 ) -> InvalidRequest:
    """The 422 for a target epsilon that even the largest noise does not reach."""
    floor = accounting.PRVAccountant().epsilon(
        [accounting.Mechanism(accounting.MAX_NOISE_MULTIPLIER, sample_rate, steps)], delta
    ) if request.search is None else search.floor_epsilon(
        search=request.search, model=request.training.model, delta=delta,
        sample_rate=sample_rate, steps=steps)
    return InvalidRequest(
        f"target_epsilon {request.privacy.target_epsilon:g} cannot be reached with "
        f"{request.training.epochs} epochs at batch size {request.training.batch_size}: "
        f"even noise {accounting.MAX_NOISE_MULTIPLIER:g} spends {floor:.3g}; use fewer "
        "epochs, a smaller batch or a larger epsilon",
        field="privacy.target_epsilon",
        allowed=f"[{floor:.3g}, 100]",
    )


def _fewer_epochs(request: JobCreate, training: TrainingConfig, delta: float,
                  sample_rate: float, steps: int) -> TrainingConfig | None:
    """``training`` with the most epochs that reach the target at the largest noise, when
    the request left the epochs to the default (``app.jobs.recipe``); else None."""
    if request.privacy.target_epsilon is None or request.training.epochs is not None:
        return None
    assert training.epochs is not None
    epochs = noise.epochs_for_target(
        target_epsilon=request.privacy.target_epsilon, delta=delta, sample_rate=sample_rate,
        steps_per_epoch=steps // training.epochs, max_epochs=training.epochs, accountant="prv",
    ) if request.search is None else search.epochs_for_target(
        search=request.search, model=training.model, target_epsilon=request.privacy.target_epsilon,
        delta=delta, sample_rate=sample_rate, steps_per_epoch=steps // training.epochs,
        max_epochs=training.epochs)
    return None if epochs is None else training.model_copy(update={"epochs": epochs})


def _plan_noise(
    request: JobCreate, dataset: Dataset, delta: float, training: TrainingConfig,
    sample_rate: float, steps: int,
) -> tuple[TrainingConfig, float, int, float]:
    """(training, sample rate, steps, noise multiplier): the resolved plan's, or with fewer
    default epochs where its target is out of reach at the largest noise.

    Raises:
        InvalidRequest: the target is out of reach even with one epoch, or with the epochs
            the request set.
    """
    resolved = request.model_copy(update={"training": training})
    try:
        return training, sample_rate, steps, _resolve_noise(
            resolved, dataset, delta, sample_rate, steps)
    except noise.TargetUnreachable as exc:
        fewer = _fewer_epochs(request, training, delta, sample_rate, steps)
        if fewer is None:
            raise _unreachable(resolved, delta, sample_rate, steps) from exc
    assert fewer.batch_size is not None and fewer.epochs is not None
    sample_rate, steps = _plan_sampling(dataset, fewer.batch_size, fewer.epochs)
    resolved = request.model_copy(update={"training": fewer})
    return fewer, sample_rate, steps, _resolve_noise(resolved, dataset, delta, sample_rate,
                                                      steps)


class DatasetNotTrainable(Conflict):
    kind, title = "dataset-not-trainable", "The dataset cannot be trained on now"


def check_trainable(dataset: Dataset) -> None:
    """Refuse (409) a dataset without rows (awaiting its upload, or erased), and (422) an
    unlabelled follow-up: no outcome to train on or to evaluate the model with.

    Raises:
        DatasetUnlabelled: features only (422, naming ``dataset_id``).
        DatasetNotTrainable: with the dataset's state.
    """
    labels.check_labelled(dataset, needs="training and its held-out evaluation")
    if dataset.state != READY:
        raise DatasetNotTrainable(
            f"dataset {dataset.id} is {dataset.state}: "
            + ("send its rows with PUT /v1/datasets/{id}/data first"
               if dataset.state == AWAITING_DATA else "its rows were erased"),
            field="dataset_id", state=dataset.state,
        )


def plan(*, dataset: Dataset, request: JobCreate) -> Job:
    """The job's DP mechanism planned from the request and public facts of the dataset.

    Fills the size-dependent defaults, derives the Poisson plan, resolves delta and finds the
    noise for a target epsilon; where the default epochs cannot reach that target even at the
    largest noise, plans the most epochs that can; then sets a default clip norm by the public
    rule of ``app.jobs.recipe``. A family not trained by DP-SGD plans its one release instead
    (``app.jobs.fitted``). Nothing is stored: ``app.flows.training.submit_training`` queues
    the job and reserves its spend. The size floors come first: a dataset too small for the
    job is refused before the ledger is touched.

    Raises:
        InvalidRequest: a parameter is outside what this dataset allows.
        DatasetTooSmall: a part of the dataset is below its size floor (a 422).
    """
    delta = resolve_delta(dataset, request.privacy.delta)
    inputs = recipe.n_inputs(dataset)
    size_floor.check_job(dataset=dataset, target_epsilon=request.privacy.target_epsilon,
                         delta=delta, inputs=inputs)
    if not (family := create_family(request.training.model)).dp_sgd:  # one release
        return fitted.plan(dataset=dataset, request=request, family=family, delta=delta,
                           inputs=inputs)
    training = _resolve_training(recipe.capped_regime(  # small or wide tables at small epsilon
        request.training, target_epsilon=request.privacy.target_epsilon, delta=delta,
        n_train=dataset.n_train, n_calibration=dataset.n_calibration, inputs=inputs), dataset)
    assert training.batch_size is not None and training.epochs is not None
    sample_rate, steps = _plan_sampling(dataset, training.batch_size, training.epochs)
    training, sample_rate, steps, sigma = _plan_noise(request, dataset, delta, training,
                                                      sample_rate, steps)
    if training.max_grad_norm is None:
        training = training.model_copy(update={"max_grad_norm": recipe.default_clip(
            noise_multiplier=sigma, sample_rate=sample_rate, steps=steps,
            n_train=dataset.n_train, inputs=inputs)})
    stored = training.model_dump()
    if request.search is not None:  # kept with the training request it varies
        stored[search.SEARCH_KEY] = search.plan(
            search=request.search, request_training=request.training, noise_multiplier=sigma,
            sample_rate=sample_rate, steps=steps, delta=delta, budget_delta=dataset.budget_delta,
            filters=search.filters_of(dataset))
    job = Job(
        dataset_id=dataset.id,
        status=QUEUED,
        target_epsilon=request.privacy.target_epsilon,
        requested_noise_multiplier=request.privacy.noise_multiplier,
        noise_multiplier=sigma,
        sample_rate=sample_rate,
        steps=steps,
        epochs=training.epochs,
        delta=delta,
        max_grad_norm=training.max_grad_norm,
        training=stored,
        progress_epoch=0, epsilon_per_epoch=[], cancel_requested=False,
    )
    if request.privacy.target_epsilon is None:  # a noise multiplier: its planned epsilon
        planned = planned_epsilon(job)["prv"]
        size_floor.check_training(dataset=dataset, epsilon=math.inf if planned is None
                                  else planned, delta=delta, inputs=inputs,
                                  field=size_floor.NOISE_FIELD)
    return job


def enqueue(*, session: Session, job: Job) -> Job:
    """Insert a queued job and NOTIFY the workers in the same transaction (PostgreSQL)."""
    session.add(job)
    session.flush()
    notify.notify_workers(session)
    return job


def mechanism_of(job: Job) -> accounting.Mechanism:
    """A DP-SGD job's planned mechanism (raises NotDpSgd for a one-release job)."""
    plan = job.dp_sgd_plan
    return accounting.Mechanism(plan.noise_multiplier, plan.sample_rate, plan.steps)


def training_event(job: Job) -> DpEvent:
    """What the job's training spends, as its family declares it (``Family.training_event``):
    the event the ledger reserves and the planned figures compose, so a family whose training
    spends otherwise changes no branch here or in the ledger. Raises NotDpSgd for a
    one-release job (``release_event``)."""
    dp_sgd = job.dp_sgd_plan
    family = create_family(str(job.training_request.get("model", DEFAULT_FAMILY)))
    run = family.training_event(noise_multiplier=dp_sgd.noise_multiplier,
                                sample_rate=dp_sgd.sample_rate, steps=dp_sgd.steps)
    plan = search.stored_plan(job.training_request)
    return run if plan is None else search.event_of(plan, run)  # the whole search


def get(*, session: Session, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None:
        raise JobNotFound(f"job {job_id} does not exist", field="job_id")
    return job


def list_page(
    *,
    session: Session,
    limit: int,
    offset: int,
    status: str | None = None,
    dataset_id: int | None = None,
) -> tuple[list[Job], int]:
    # The kinds that declare themselves listed: training jobs, a federation's part included
    # (privacy audits: GET /v1/audits; monitoring runs and comparisons: their own routes).
    stmt = select(Job).where(Job.kind.in_(kinds.listed()))
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if dataset_id is not None:
        stmt = stmt.where(Job.dataset_id == dataset_id)
    total = session.scalar(select(func.count()).select_from(stmt.subquery())) or 0
    rows = session.scalars(stmt.order_by(Job.id.desc()).limit(limit).offset(offset))
    return list(rows), total


def cancel(*, session: Session, job: Job) -> bool:
    """Cancel a queued job (its reservation is released) or ask a running one to stop.

    A running job has touched data, so its charge stays; the worker ends it as cancelled. Both
    changes are conditional UPDATEs, so of many concurrent cancels exactly one changes the job
    (and is the one to audit); ``job`` is refreshed to what it is now.

    Returns:
        True when this call changed the job; False when a running job had already been asked
        to stop (nothing to do, nothing to record).

    Raises:
        Conflict: the job has already finished (another cancel, racing this one, included).
    """
    if job.status in FINISHED:
        raise Conflict(f"job {job.id} has already finished ({job.status})", field="status")
    # One conditional UPDATE races fairly with the worker's claim (which also requires
    # status = 'queued'): exactly one of them wins, and both lock the job row before the
    # dataset row, so they cannot deadlock.
    cancelled = _update_if(session, job, Job.status == QUEUED,
                           status=CANCELLED, finished_at=utcnow())
    if cancelled:
        ledger_service.release(session=session, scope=Scope.job(job.id))
        return True
    stopping = _update_if(session, job, Job.status == RUNNING, Job.cancel_requested.is_(False),
                          cancel_requested=True)
    if not stopping and job.status in FINISHED:
        raise Conflict(f"job {job.id} has already finished ({job.status})", field="status")
    return stopping


def _update_if(session: Session, job: Job, *conditions: Any, **values: Any) -> bool:
    """Set ``values`` on ``job`` if ``conditions`` hold, in one statement; refresh ``job``."""
    changed = affected_rows(session.execute(
        update(Job).where(Job.id == job.id, *conditions).values(**values)
        .execution_options(synchronize_session=False)
    ))
    session.refresh(job)
    return bool(changed)


def release_event(job: Job) -> DpEvent:
    """What the job spends: its training's event, a fitted family's release (as planned), or
    a monitoring run's or comparison's one Gaussian at its noise (as its entry records it)."""
    if job.dp_sgd:
        return training_event(job)
    if fitted.RELEASE_KEY in job.training_request:
        return fitted.planned_release(job)
    return accounting.Mechanism(job.noise_multiplier, 1.0, 1).event


def planned_epsilon(job: Job) -> dict[str, float | None]:
    """The job's planned epsilon by every accountant; None where it is infinite (non-private)."""
    figures = accounting.epsilon_by_accountant([release_event(job)], job.delta)
    return {name: accounting.finite_or_none(eps) for name, eps in figures.items()}
