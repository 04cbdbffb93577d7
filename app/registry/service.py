"""Model registry: record trained models, say which one scores by default, shape views.

Which model is *active* is the newest row of the append-only ``model_activation`` history:

- the first model stored while none is active is activated automatically (``auto``), so the
  zero-set-up flow (register, train, score) works without an extra step;
- every later model waits for an explicit ``activate``: a new model never replaces the one
  clinicians are scored with just because it finished training;
- ``rollback`` undoes the latest activation (a stack: rolling back twice goes back two steps).

Scoring reads the active model in one query and holds no lock, so activation never blocks it.
Writers to the history serialise on a registry lock (an advisory lock on PostgreSQL, the
database write lock on SQLite), and ``seq`` is unique as a last line of defence.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, or_, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, load_only, undefer, undefer_group

from app import bands
from app.core.errors import Conflict, NotFound
from app.core.recent import RecentMemory
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA, LEGACY_BUILT_IN_HASH
from app.datasets.schema.dataset_schema import DatasetSchema, schema_hash
from app.jobs import size_floor
from app.jobs.models import SUCCEEDED, Job
from app.privacy.accountant_names import accountant_word
from app.privacy.figures import epsilon_text
from app.privacy.terms import per_patient
from app.registry import artifacts
from app.registry.federated import federation_clause
from app.registry.models import ModelActivation, TrainedModel
from app.registry.schemas import ModelOut, PrivacyStatementOut

if TYPE_CHECKING:
    from torch import nn

_REGISTRY_LOCK_KEY = 0x6470637269736973  # the product name in ASCII: one PostgreSQL advisory lock
scoring_models: RecentMemory[Any] = RecentMemory()
"""What scoring remembers of the models it resolved (``app.scoring.model_cache``); every writer
below that changes which model scores, or how it bands, forgets it when its session commits."""


class ModelNotFound(NotFound):
    kind, title = "model-not-found", "Model not found"


class NoActiveModel(Conflict):
    kind, title = "no-active-model", "No active model"


class ModelNotActivatable(Conflict):
    kind, title = "model-not-activatable", "Model cannot be activated"


class ModelUnavailable(Conflict):
    kind, title = "model-unavailable", "Model unavailable"


class NothingToRollBack(Conflict):
    kind, title = "nothing-to-roll-back", "Nothing to roll back to"


class ActivationRace(Conflict):
    kind, title = "activation-race", "Activation changed concurrently"


def get(*, session: Session, model_id: int) -> TrainedModel:
    model = session.get(TrainedModel, model_id)
    if model is None:
        raise ModelNotFound(f"model {model_id} does not exist", field="model_id")
    return model


def model_id_for_job(*, session: Session, job_id: int) -> int | None:
    """The id of the model a training job produced, or None (not finished, or failed)."""
    return session.scalar(select(TrainedModel.id).where(TrainedModel.job_id == job_id))


def active_id(*, session: Session) -> int | None:
    """The active model's id, or None when nothing was ever activated."""
    stmt = select(ModelActivation.model_id).order_by(ModelActivation.seq.desc()).limit(1)
    return session.scalar(stmt)


_SCORING_COLUMNS = load_only(
    TrainedModel.id, TrainedModel.job_id, TrainedModel.dataset_id, TrainedModel.kind,
    TrainedModel.artifact_sha256, TrainedModel.epsilon, TrainedModel.epsilon_rdp,
    TrainedModel.delta, TrainedModel.accountant, TrainedModel.band_thresholds,
    TrainedModel.created_at,
)
"""What scoring reads: the held-out metrics (a large JSON document) stay unloaded."""

_ACTIVE = (
    select(TrainedModel)
    .options(_SCORING_COLUMNS)
    .join(ModelActivation, ModelActivation.model_id == TrainedModel.id)
    .order_by(ModelActivation.seq.desc())
    .limit(1)
)


def active(*, session: Session) -> TrainedModel:
    """The model scoring uses when none is named (one query, no lock).

    Raises:
        ModelNotFound: no model trained yet (404).
        NoActiveModel: models exist but none was ever activated (409).
    """
    model = session.scalar(_ACTIVE)
    if model is not None:
        return model
    if session.scalar(select(func.count()).select_from(TrainedModel)):
        raise NoActiveModel(
            "no model is active: activate one with POST /v1/models/{id}/activate or name "
            "model_id",
            field="model_id",
        )
    raise ModelNotFound("no trained model yet: submit a training job first", field="model_id")


def resolve(*, session: Session, model_id: int | None) -> TrainedModel:
    """The named model (any succeeded one, active or not), else the active one."""
    if model_id is None:
        return active(session=session)
    model = session.scalar(
        select(TrainedModel).options(_SCORING_COLUMNS).where(TrainedModel.id == model_id)
    )
    if model is None:
        raise ModelNotFound(f"model {model_id} does not exist", field="model_id")
    return model


def schema_of(model: TrainedModel) -> DatasetSchema:
    """The declared schema the model was trained on (before schemas: the built-in schema)."""
    if model.schema_json is None:
        return BUILT_IN_SCHEMA
    return DatasetSchema.model_validate(model.schema_json)


def schema_hash_of(model: TrainedModel) -> str:
    return model.schema_hash or schema_hash(BUILT_IN_SCHEMA)


def built_in_schema_in_use(*, session: Session) -> bool:
    """Whether any stored model was trained on the built-in schema (a model from before
    schemas has no hash and is one): only then does the service describe that outcome."""
    hashes = (schema_hash(BUILT_IN_SCHEMA), LEGACY_BUILT_IN_HASH)
    found = session.scalar(select(TrainedModel.id).where(
        or_(TrainedModel.schema_hash.in_(hashes), TrainedModel.schema_hash.is_(None))).limit(1))
    return found is not None


def schema_hashed(*, session: Session, prefix: str) -> DatasetSchema | None:
    """The declared schema of a stored model whose schema hash starts with ``prefix`` (hex), if
    any: FHIR names a declaration's local code system by the start of its hash."""
    model = session.scalars(
        select(TrainedModel)
        .options(load_only(TrainedModel.schema_json, TrainedModel.schema_hash))
        .where(TrainedModel.schema_hash.startswith(prefix, autoescape=True))
        .order_by(TrainedModel.id).limit(1)
    ).first()
    return None if model is None else schema_of(model)


def load_network(model: TrainedModel) -> "nn.Module":
    """Load and verify a model's weights.

    Raises:
        ModelUnavailable: the artifact is missing or its bytes no longer match the hash.
    """
    try:
        network, _ = artifacts.load(model.artifact_sha256,
                                    expected_schema_hash=schema_hash_of(model))
    except (FileNotFoundError, artifacts.ArtifactCorrupt) as exc:
        raise ModelUnavailable(f"model {model.id}'s artifact is missing or does not match its "
                               "SHA-256", field="model_id") from exc
    return network


def _lock_registry(session: Session) -> None:
    """Serialise writers of the activation history; readers (scoring) never wait on it."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _REGISTRY_LOCK_KEY})
    else:  # SQLite: a write statement takes the database write lock before anything is read
        session.execute(text("UPDATE model_activation SET seq = seq WHERE 1 = 0"))


def _append(
    session: Session, *, model_id: int, previous_model_id: int | None, action: str
) -> ModelActivation:
    head = session.scalar(select(func.max(ModelActivation.seq))) or 0
    row = ModelActivation(
        seq=head + 1, model_id=model_id, previous_model_id=previous_model_id, action=action
    )
    session.add(row)
    scoring_models.forget_on_commit(session)
    try:
        session.flush()
    except IntegrityError as exc:  # only a writer that skipped the lock can get here
        raise ActivationRace("another activation was written at the same time: retry") from exc
    return row


def activate(*, session: Session, model: TrainedModel) -> ModelActivation | None:
    """Make ``model`` the active one; None if it already is (nothing is written).

    Raises:
        ModelNotActivatable: its job did not succeed (409).
        ModelUnavailable: its artifact is missing or corrupt (409).
    """
    status = session.scalar(select(Job.status).where(Job.id == model.job_id))
    if status != SUCCEEDED:
        raise ModelNotActivatable(
            f"model {model.id} comes from a job that is {status}: only models of succeeded "
            "jobs can be activated",
            field="model_id",
        )
    load_network(model)
    _lock_registry(session)
    current = active_id(session=session)
    if current == model.id:
        return None
    return _append(session, model_id=model.id, previous_model_id=current, action="activate")


def activate_if_none(*, session: Session, model: TrainedModel) -> bool:
    """Activate a newly stored model only if no model is active (the worker calls this)."""
    session.flush()
    _lock_registry(session)
    if active_id(session=session) is not None:
        return False
    _append(session, model_id=model.id, previous_model_id=None, action="auto")
    return True


def _activation_stack(session: Session) -> list[int]:
    """Replay the history: activations push a model, a rollback pops one."""
    stack: list[int] = []
    rows = session.execute(
        select(ModelActivation.action, ModelActivation.model_id).order_by(ModelActivation.seq)
    )
    for action, model_id in rows:
        if action == "rollback" and stack:
            stack.pop()
        if not stack or stack[-1] != model_id:
            stack.append(model_id)
    return stack


def rollback(*, session: Session) -> tuple[TrainedModel, ModelActivation]:
    """Go back to the model that was active before the latest activation.

    Raises:
        NothingToRollBack: no earlier activation to return to (409).
    """
    _lock_registry(session)
    stack = _activation_stack(session)
    if len(stack) < 2:
        raise NothingToRollBack(
            "there is no previously active model to roll back to", field="model_id"
        )
    target = get(session=session, model_id=stack[-2])
    load_network(target)
    row = _append(session, model_id=target.id, previous_model_id=stack[-1], action="rollback")
    return target, row


def set_band_thresholds(
    *, session: Session, model: TrainedModel, thresholds: Mapping[str, float]
) -> TrainedModel:
    """Replace a model's band thresholds; scoring uses them from the next request on."""
    model.band_thresholds = bands.validate_thresholds(thresholds)
    scoring_models.forget_on_commit(session)
    session.flush()
    return model


def list_page(*, session: Session, limit: int, offset: int) -> tuple[list[TrainedModel], int]:
    total = session.scalar(select(func.count()).select_from(TrainedModel)) or 0
    stmt = (select(TrainedModel).options(undefer(TrainedModel.training_rows_erased_at),
                                         undefer_group("patient"))
            .order_by(TrainedModel.id.desc()).limit(limit).offset(offset))
    return list(session.scalars(stmt)), total


def history_page(
    *, session: Session, limit: int, offset: int
) -> tuple[list[ModelActivation], int]:
    total = session.scalar(select(func.count()).select_from(ModelActivation)) or 0
    stmt = (
        select(ModelActivation).order_by(ModelActivation.seq.desc()).limit(limit).offset(offset)
    )
    return list(session.scalars(stmt)), total


def version_of(model: TrainedModel) -> str:
    """The first 12 hex digits of the artifact's SHA-256: same version, same weights."""
    return model.artifact_sha256[:12]


def privacy_sentence(model: TrainedModel) -> str:
    """The model's guarantee in one sentence, for cards, notes and dashboards."""
    if model.epsilon is None:
        return (
            f"Model {model.id} was trained without differential privacy (epsilon = infinity) "
            f"on a public dataset.{_calibration_clause(model)}"
        )
    patients = per_patient(model.patient_space_kind, model.patient_budget_epsilon,
                           model.patient_budget_delta)  # the training dataset's space, now
    return (
        f"Model {model.id} was trained with DP-SGD: ({epsilon_text(model.epsilon)}, "
        f"{model.delta:g})-differential privacy per patient record "
        f"({accountant_word(model.accountant)} accountant).{_calibration_clause(model)}"
        f"{' ' + patients if patients else ''}{federation_clause(model)}"
    )



@dataclass(frozen=True)
class HeldOut:
    """What the model's stored metrics say about its held-out releases."""

    calibrated: bool  # a calibration was released (absent before it; withheld below its floor)
    evaluation_dp: bool  # the metrics are a DP evaluation release (absent: computed exactly)
    warnings: tuple[str, ...] = ()  # held-out parts below their size floor (app.jobs.size_floor)


_held_out: dict[tuple[int, str], HeldOut] = {}


def held_out(model: TrainedModel) -> HeldOut:
    """The model's held-out releases; cached per model (models never change), so scoring does
    not load the large ``metrics`` column on every request."""
    key = (model.id, model.artifact_sha256)
    if key not in _held_out:
        metrics = model.metrics or {}
        calibration = metrics.get("calibration")
        _held_out[key] = HeldOut(
            calibrated=calibration is not None
            and calibration.get("method") != size_floor.CALIBRATION_WITHHELD,
            evaluation_dp=isinstance(metrics.get("release"), dict),
            warnings=tuple(w["message"] for w in metrics.get("held_out_warnings") or ()))
    return _held_out[key]


def _calibration_clause(model: TrainedModel) -> str:
    """How the probabilities were calibrated and the metrics computed; no row count (the parts'
    sizes are not released, the evaluation's counts are noisy)."""
    facts = held_out(model)
    if facts.warnings:
        return _shortfall_clause(model, facts)
    if not facts.calibrated:
        return " Its probabilities are uncalibrated (stored before held-out calibration)."
    if model.epsilon is None:
        return (" Its probabilities were calibrated on a held-out part and its metrics computed "
                "exactly on another (public dataset).")
    if not facts.evaluation_dp:
        return (" Its probabilities were calibrated on a held-out part under the same guarantee; "
                "its metrics were stored before the evaluation was a DP release (not covered).")
    return (" Its probabilities were calibrated on a held-out part and its metrics computed on "
            "another: calibration and evaluation are DP releases on disjoint held-out parts, "
            "composed in parallel with training under the same guarantee.")


def _shortfall_clause(model: TrainedModel, facts: HeldOut) -> str:
    """A held-out part below its size floor: its warning first, then what was released."""
    what = ("Its probabilities were calibrated on a held-out part and its metrics computed on "
            "another: both are releases on disjoint held-out parts"
            if facts.calibrated else "The evaluation is a release on a held-out part")
    how = (" with exact counts (public dataset)." if model.epsilon is None
           else ", composed in parallel with training under the same guarantee.")
    return f" Warning: {' '.join(facts.warnings)} {what}{how}"


def privacy_statement(model: TrainedModel) -> PrivacyStatementOut:
    """The model's guarantee, for its view and for every score it gives."""
    return PrivacyStatementOut.from_row(
        model,
        non_private=model.epsilon is None,
        calibrated=held_out(model).calibrated,
        statement=privacy_sentence(model),
    )


def describe(*, model: TrainedModel, active_model_id: int | None) -> ModelOut:
    """The model as the API shows it: its row, version, guarantee and whether it is active."""
    return ModelOut.from_row(
        model,
        version=version_of(model),
        active=model.id == active_model_id,
        privacy=privacy_statement(model),
        model_schema=schema_of(model),
        schema_hash=schema_hash_of(model),
    )
