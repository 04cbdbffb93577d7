"""CDS Hooks service: discovery document, and one card per ``patient-view`` call.

Both follow the *active* model's declared schema (``app.cdshooks.prefetch`` says where each
feature comes from): discovery asks for the Patient when the schema has an age feature and
for the latest Observation of each coded feature, and lists the features no prefetch can carry.
A call whose model has such features answers an "insufficient data" card naming them (with
any prefetchable ones the call lacked) instead of a score; otherwise a prefetch lacking data is
a 412, as before. Discovery changes when another model is activated: EHRs should read it again.

When no model is active (none trained, or none activated yet), discovery still answers: it
describes the built-in crisis schema, the one a model trained on the built-in generator uses,
says so in its description and gives ``dev.dpcrisis.model-id`` as null; a call then answers
the 404 / 409 that ``/v1/risk`` answers.
"""

from datetime import date
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from app.cdshooks.cards import card, insufficient_card
from app.cdshooks.prefetch import Sources, features_from_prefetch, incomplete, sources_of
from app.cdshooks.schemas import CdsResponse, CdsService, Discovery, FeatureCode, ServiceExtension
from app.core.errors import DomainError, InvalidRequest, NotFound
from app.datasets.encoding import CRISIS_ENCODER, Encoder
from app.fhir.codes import HORIZON_DAYS, OUTCOME_TEXT, label_of
from app.scoring import model_cache
from app.scoring import service as scoring_service
from app.scoring.patients import allowed_of, features_model

SERVICE_ID = "dpcrisis-crisis-risk"
HOOK = "patient-view"
PATIENT_TEMPLATE = "Patient/{{context.patientId}}"


class UnknownService(NotFound):
    kind, title = "cds-service-not-found", "CDS service not found"


class WrongHook(DomainError):
    status, kind, title = 400, "wrong-hook", "Hook not supported by this service"


def _search_value(text: str) -> str:
    """A token part in a FHIR search: ``\\``, ``|``, ``,`` and ``$`` escaped, then URL-quoted."""
    for special in ("\\", "|", ",", "$"):
        text = text.replace(special, f"\\{special}")
    return quote(text, safe=":/")


def _patient_key(sources: Sources) -> str:
    """``patient``, unless a feature already has that name."""
    names = {f.name for f in sources.features}
    return "patient" if "patient" not in names else "patient_resource"


def _prefetch_templates(sources: Sources) -> dict[str, str]:
    templates = {} if sources.age is None else {_patient_key(sources): PATIENT_TEMPLATE}
    for c in sources.observed:
        if sources.age is not None and c.feature.name == sources.age.name:
            continue  # from Patient.birthDate (an age Observation is used if sent anyway)
        token = f"{_search_value(c.system)}|{_search_value(c.code)}"
        templates[c.feature.name] = (
            f"Observation?patient={{{{context.patientId}}}}&code={token}&_sort=-date&_count=1"
        )
    return templates


def _feature_codes(sources: Sources) -> list[FeatureCode]:
    codes = {c.feature.name: c for c in sources.observed}
    age = None if sources.age is None else sources.age.name
    listed = []
    for f in sources.needed:
        c = codes.get(f.name)  # None: an uncoded age, from birthDate only
        listed.append(FeatureCode(
            feature=f.name, label=label_of(f),
            prefetch=_patient_key(sources) if f.name == age else f.name,
            system=None if c is None else c.system, code=None if c is None else c.code,
            display=None if c is None else c.display, allowed=allowed_of(f)))
    return listed


def _description(sources: Sources, model_id: int | None) -> str:
    needs = [f"{label_of(c.feature)} ({c.token})" for c in sources.observed
             if sources.age is None or c.feature.name != sources.age.name]
    parts = [f"the Patient (birthDate, for {label_of(sources.age)})"] if sources.age else []
    if needs:
        parts.append("the latest Observation of each of: " + "; ".join(needs))
    text = (f"Probability of a {OUTCOME_TEXT}, its risk band and the features that drove it, "
            "from a model trained with differential privacy (DP-SGD). Needs "
            + (" and ".join(parts) or "nothing an EHR can send")
            + "; answers 412 when the prefetch lacks any of them.")
    if sources.unavailable:
        text += (" No prefetch can carry " + ", ".join(f.name for f in sources.unavailable)
                 + " (no code in the model's schema): every call answers an 'insufficient "
                 "data' card; score such patients with POST /v1/risk.")
    if model_id is None:
        text += (" No model is active: this describes the built-in crisis schema; read this "
                 "document again once a model is active.")
    return text


def _active() -> tuple[Encoder, int | None]:
    """The active model's encoder and id; the crisis schema's and None when none is active."""
    try:
        model = model_cache.resolve(None)
    except DomainError:
        return CRISIS_ENCODER, None
    return model.encoder, model.id


def discovery() -> Discovery:
    """The ``GET /cds-services`` document: one service on ``patient-view``."""
    encoder, model_id = _active()
    sources = sources_of(encoder)
    service = CdsService(
        hook=HOOK,
        id=SERVICE_ID,
        title=f"{HORIZON_DAYS}-day mental-health crisis risk",
        description=_description(sources, model_id),
        prefetch=_prefetch_templates(sources),
        usageRequirements="Send every prefetch key: the service does not query the FHIR server. "
        "The keys follow the active model's schema: read discovery again after a model is "
        "activated.",
        extension=ServiceExtension(
            model_id=model_id, feature_codes=_feature_codes(sources),
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


def evaluate(
    *, service_id: str, hook: str, patient_id: str,
    prefetch: dict[str, Any] | None, today: date,
) -> tuple[CdsResponse, int | None]:
    """Answer one hook call with one card, and the id of the model that scored it (for the
    audit log; None when an insufficient-data card answers and nothing was scored).

    Raises:
        UnknownService: not this service's id (404).
        WrongHook: a hook other than patient-view (400).
        ModelNotFound, NoActiveModel: no model to score with (404, 409).
        PrefetchIncomplete: prefetchable features missing from the prefetch (412).
        InvalidRequest: a prefetched value the model cannot use (422).
    """
    if service_id != SERVICE_ID:
        raise UnknownService(f"no CDS service {service_id!r}; this server has {SERVICE_ID!r}")
    if hook != HOOK:
        raise WrongHook(f"service {SERVICE_ID} answers {HOOK!r}, not {hook!r}", field="hook",
                        allowed=HOOK)
    model = model_cache.resolve(None)
    sources = sources_of(model.encoder)
    got = features_from_prefetch(prefetch, sources=sources, patient_id=patient_id, today=today)
    if sources.unavailable:
        answer = insufficient_card(model=model.block, uncoded=sources.unavailable,
                                   lacking=got.missing)
        return CdsResponse(cards=[answer]), None
    if got.missing:
        raise incomplete(got.missing, sources)
    features = _checked_features(model.encoder, got.values)
    scored = scoring_service.assess(features=features, model_id=model.id)
    return CdsResponse(cards=[card(scored)]), scored.model.id
