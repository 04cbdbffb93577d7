"""CDS Hooks service: discovery document, and at most one card per ``patient-view`` call.

Both follow the *active* model's declared schema (``app.cdshooks.prefetch`` says where each
feature comes from): discovery asks for the Patient when the schema has an age feature, for
the latest Observation of each coded feature, for the patient's Conditions and Encounters where
the schema has diagnoses or sessions, and lists the features no prefetch can carry.

What a call gets:

- no data is not an error: a feature whose key came as ``null`` or an empty searchset, or one
  no prefetch can carry, gets an "insufficient data" card naming them (200), never a score;
- a 412 only when every key of a needed feature was left out (the service could not retrieve
  data it needed: it never queries the EHR itself);
- a feature the schema declares ``"missing": "reference"`` is never lacking: without data it
  is scored at its reference value, as at training, and the risk card names it;
- a scored patient gets a risk card when their band is at least the minimum band
  (``DPCRISIS_CDS_MIN_BAND``, medium by default, in discovery's ``dev.dpcrisis.min-band``);
  below it, no card (an empty list), unless the request's ``extension`` asks for a lower one:
  ``{"dev.dpcrisis.min-band": "low"}`` shows every patient.

Card topics (``source.topic``) follow the outcome, not the model (``app.fhir.codes.topic_of``):
stable across the models and versions of one outcome; the model that scored is named in the
card's detail. Discovery changes when another model is activated: EHRs should read it again.

When no model is active (none trained, or none activated yet), discovery still answers: it
describes the built-in generator's schema, the one a model trained on the built-in generator uses,
says so in its description and gives ``dev.dpcrisis.model-id`` as null; a call then answers
the 404 / 409 that ``/v1/risk`` answers.
"""

from datetime import date
from typing import Any

from pydantic import ValidationError

from app.bands import BANDS, Band
from app.cdshooks.cards import card, insufficient_card
from app.cdshooks.prefetch import (
    PATIENT,
    Sources,
    features_from_prefetch,
    incomplete,
    sources_of,
)
from app.cdshooks.schemas import (
    CdsResponse,
    CdsService,
    DiagnosisCoding,
    Discovery,
    FeatureCode,
    ServiceExtension,
)
from app.core.errors import DomainError, InvalidRequest, NotFound
from app.core.settings import settings
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA, LEGACY_SERVICE_ID
from app.datasets.schema.dataset_schema import outcome_words
from app.datasets.schema.encoding import GENERATOR_ENCODER, Encoder
from app.fhir.codes import BUILT_IN_TOPIC, label_of, topic_of
from app.scoring import model_cache
from app.scoring import service as scoring_service
from app.scoring.patients import allowed_of, features_model, imputable
from app.scoring.schemas import RiskResult

SERVICE_ID = "dpcrisis-risk"
"""The service's id, as discovery lists it: the product's name and nothing of an outcome, since
the active model may predict any declared outcome (the title, the description and the cards
name it)."""
LEGACY_SERVICE_IDS = (LEGACY_SERVICE_ID,)
"""Ids discovery listed before outcomes were declared: still answered (hooks and feedback), so
no EHR registration breaks, but no longer listed. The id names the built-in schema's outcome,
so a hook call on it is answered only while the active model predicts that outcome (its card
topic, ``app.fhir.codes.topic_of``); a model of another outcome is never served under it."""
SERVICE_IDS = (SERVICE_ID, *LEGACY_SERVICE_IDS)
HOOK = "patient-view"


class UnknownService(NotFound):
    kind, title = "cds-service-not-found", "CDS service not found"


class WrongHook(DomainError):
    status, kind, title = 400, "wrong-hook", "Hook not supported by this service"



def _resource(sources: Sources, name: str) -> str:
    declared = next((d for d in sources.declared if d.feature.name == name), None)
    if declared is not None:
        return declared.resource
    if name in {f.name for f in (sources.age, sources.sex) if f is not None}:
        return "Patient"
    if any(d.feature.name == name for d in sources.diagnoses):
        return "Condition"
    if sources.sessions is not None and name == sources.sessions.name:
        return "Encounter"
    return "Observation"


def _path(sources: Sources, name: str) -> str | None:
    """The element a feature is read from, where it is one element of one resource."""
    declared = next((d for d in sources.declared if d.feature.name == name), None)
    if declared is not None:
        return declared.path
    if sources.age is not None and name == sources.age.name:
        return "birthDate"
    if sources.sex is not None and name == sources.sex.name:
        return "gender"
    return None


def _feature_code(sources: Sources, f: Any) -> FeatureCode:
    resource = _resource(sources, f.name)
    c = next((c for c in sources.observed if c.feature.name == f.name), None)
    if resource in ("Condition", "Encounter"):
        c = None  # not read from an Observation of its own code (a local one still is)
    diagnosis = next((d for d in sources.diagnoses if d.feature.name == f.name), None)
    codes = [] if diagnosis is None else [
        DiagnosisCoding(system=d.system, code=d.code, display=d.display, below=d.below)
        for d in diagnosis.codes]
    return FeatureCode(
        feature=f.name, label=label_of(f), prefetch=sources.keys[f.name][0], resource=resource,
        path=_path(sources, f.name), system=None if c is None else c.system,
        code=None if c is None else c.code, display=None if c is None else c.display,
        codes=codes, allowed=allowed_of(f))


def _feature_codes(sources: Sources) -> list[FeatureCode]:
    return [_feature_code(sources, f) for f in sources.needed]


def _needs(sources: Sources) -> str:
    """What the prefetch should carry, in words."""
    observed = [f"{label_of(c.feature)} ({c.token})" for c in sources.observed
                if _resource(sources, c.feature.name) == "Observation"]
    patient = [f"{path} for {label_of(f)}" for f, path in ((sources.age, "birthDate"),
                                                             (sources.sex, "gender")) if f]
    queried = [d for d in sources.declared if d.query != PATIENT]
    patient += [f"{d.path} for {label_of(d.feature)}" for d in sources.declared
                if d.query == PATIENT]
    parts = [f"the Patient ({'; '.join(patient)})"] if patient else []
    parts += [f"{d.query} ({d.resource}.{d.path}, for {label_of(d.feature)})" for d in queried]
    if observed:
        parts.append("the latest Observation of each of: " + "; ".join(observed))
    if sources.diagnoses:
        parts.append("the patient's Conditions (for " + ", ".join(
            label_of(d.feature) for d in sources.diagnoses) + ": any with the listed codes)")
    if sources.sessions is not None:
        parts.append(f"the patient's Encounters ({label_of(sources.sessions)}: those in the "
                     "last 12 months, counted)")
    return " and ".join(parts) or "nothing an EHR can send"


def _absence(sources: Sources) -> str:
    """Where no resource is an answer (diagnoses: no; sessions: 0), in words."""
    said = [f"no Condition is a no for {', '.join(label_of(d.feature) for d in sources.diagnoses)}"
            ] if sources.diagnoses else []
    if sources.sessions is not None:
        said.append(f"no Encounter is 0 for {label_of(sources.sessions)}")
    return f" ({'; '.join(said)})" if said else ""


def _description(sources: Sources, model_id: int | None, outcome: str) -> str:
    text = (f"Probability of the model's outcome ({outcome}), its risk band and the features "
            "that drove it, "
            f"from a model trained with differential privacy (DP-SGD). Needs {_needs(sources)}. "
            "A key sent as null or an empty searchset is no data: the answer is an "
            f"'insufficient data' card naming what is missing{_absence(sources)}; a key left "
            f"out is a 412. Patients below the {settings.dpcrisis_cds_min_band} band get no "
            "card unless the call's extension dev.dpcrisis.min-band asks for a lower one.")
    imputed = [f.name for f in sources.features if imputable(f)]
    if imputed:
        text += (" The model's schema lets " + ", ".join(imputed) + " be missing: without "
                 "data it is scored at its reference value (as in training), and the card "
                 "says so.")
    if sources.blocking:
        text += (" No prefetch can carry " + ", ".join(f.name for f in sources.blocking)
                 + " (no code or prefetch in the model's schema): every call answers an "
                 "'insufficient data' card; score such patients with POST /v1/risk.")
    if model_id is None:
        text += (" No model is active: this describes the built-in generator's schema; read this "
                 "document again once a model is active.")
    return text


def _active() -> tuple[Encoder, int | None]:
    """The active model's encoder and id; the built-in schema's and None when none is active."""
    try:
        model = model_cache.resolve(None)
    except DomainError:
        return GENERATOR_ENCODER, None
    return model.encoder, model.id


def discovery() -> Discovery:
    """The ``GET /cds-services`` document: one service on ``patient-view``."""
    encoder, model_id = _active()
    sources = sources_of(encoder)
    service = CdsService(
        hook=HOOK,
        id=SERVICE_ID,
        title=f"Risk: {outcome_words(encoder.schema)}"[:100],
        description=_description(sources, model_id, outcome_words(encoder.schema)),
        prefetch=dict(sources.templates),
        usageRequirements="Send every prefetch key: the service does not query the FHIR server. "
        "The keys follow the active model's schema: read discovery again after a model is "
        "activated.",
        extension=ServiceExtension(
            model_id=model_id, feature_codes=_feature_codes(sources),
            min_band=settings.dpcrisis_cds_min_band,
            not_prefetchable=[f.name for f in sources.unavailable]),
    )
    return Discovery(services=[service])


def _checked_features(encoder: Encoder, raw: dict[str, Any]) -> dict[str, Any]:
    """The prefetched values through the same validation as /v1/risk, errors named by key."""
    try:
        return features_model(encoder).model_validate(raw).model_dump()
    except ValidationError as exc:
        errors = [
            {"field": f"prefetch.{e['loc'][0]}", "message": e["msg"],
             "allowed": (e.get("ctx") or {}).get("allowed")}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['field']}: {e['message']} (allowed {e['allowed']})"
                           for e in errors)
        raise InvalidRequest(detail, errors=errors) from None


def _shown(band: str, min_band: str | None) -> bool:
    lowest = Band(min_band or settings.dpcrisis_cds_min_band)
    return BANDS.index(Band(band)) >= BANDS.index(lowest)


def evaluate(
    *, service_id: str, hook: str, patient_id: str, prefetch: dict[str, Any] | None,
    today: date, min_band: str | None = None,
) -> tuple[CdsResponse, RiskResult | None]:
    """Answer one hook call with at most one card, and the patient's scored answer (None when
    an insufficient-data card answers and nothing was scored): the caller audits it and counts
    it in the served-score series from this one scoring, never a second.

    Args:
        min_band: the lowest band that gets a card (None: ``DPCRISIS_CDS_MIN_BAND``); a
            patient scored below it gets no card (an empty list), and is still audited and
            counted (a band mix without them would follow each EHR's minimum band).

    Raises:
        UnknownService: not this service's id, or the first release's id while the active
            model predicts another outcome than the built-in schema's (404).
        WrongHook: a hook other than patient-view (400).
        ModelNotFound, NoActiveModel: no model to score with (404, 409).
        PrefetchIncomplete: features whose prefetch keys were all left out (412).
        InvalidRequest: a prefetched value the model cannot use (422).
    """
    if service_id not in SERVICE_IDS:
        raise UnknownService(f"no CDS service {service_id!r}; this server has {SERVICE_ID!r}")
    if hook != HOOK:
        raise WrongHook(f"service {SERVICE_ID} answers {HOOK!r}, not {hook!r}", field="hook",
                        allowed=HOOK)
    model = model_cache.resolve(None)
    if service_id in LEGACY_SERVICE_IDS and topic_of(model.encoder.schema) != BUILT_IN_TOPIC:
        raise UnknownService(
            f"{service_id!r} is the first release's service of "
            f"{outcome_words(BUILT_IN_SCHEMA)}; the active model predicts "
            f"{outcome_words(model.encoder.schema)}: call {SERVICE_ID!r}")
    sources = sources_of(model.encoder)
    got = features_from_prefetch(prefetch, sources=sources, patient_id=patient_id, today=today)
    if got.absent and not sources.blocking:
        raise incomplete(got.absent, sources)
    if sources.blocking or got.missing:
        answer = insufficient_card(model=model.block, schema=model.encoder.schema,
                                   uncoded=sources.blocking,
                                   lacking=(*got.missing, *got.absent))
        return CdsResponse(cards=[answer]), None
    features = _checked_features(model.encoder, got.values)
    scored = scoring_service.score(features=features, model_id=model.id)
    shown = _shown(scored.band, min_band)
    cards = [card(scored, schema=model.encoder.schema)] if shown else []
    return CdsResponse(cards=cards), scored
