"""CDS Hooks service: discovery document, and one card per ``patient-view`` call.

The card is informational (no suggestions): summary under 140 characters, indicator by band
(low -> info, medium -> warning, high -> critical), and a markdown detail with the probability,
the reasons (exact Shapley contributions) and the model's privacy statement.
"""

import uuid
from datetime import date
from typing import Any

from pydantic import ValidationError

from app.bands import Band, cut_offs
from app.cdshooks.prefetch import allowed_range, features_from_prefetch
from app.cdshooks.schemas import (
    Card,
    CardSource,
    CdsResponse,
    CdsService,
    Coding,
    Discovery,
    FeatureCode,
    Indicator,
    ServiceExtension,
)
from app.core.errors import DomainError, InvalidRequest, NotFound
from app.datasets.encoding import CRISIS_ENCODER
from app.fhir.codes import FEATURE_CODES, HORIZON_DAYS, MODEL_SYSTEM
from app.fhir.service import percent
from app.scoring import service as scoring_service
from app.scoring.patients import features_model
from app.scoring.schemas import RiskResult

SERVICE_ID = "dpcrisis-crisis-risk"
HOOK = "patient-view"
INDICATOR: dict[Band, Indicator] = {Band.LOW: "info", Band.MEDIUM: "warning", Band.HIGH: "critical"}
SOURCE_LABEL = "dpcrisis 30-day crisis risk (differentially private model)"
SUMMARY_LIMIT = 140


class UnknownService(NotFound):
    kind, title = "cds-service-not-found", "CDS service not found"


class WrongHook(DomainError):
    status, kind, title = 400, "wrong-hook", "Hook not supported by this service"


def _prefetch_templates() -> dict[str, str]:
    templates = {"patient": "Patient/{{context.patientId}}"}
    for c in FEATURE_CODES:
        if c.feature.name == "age":
            continue  # from Patient.birthDate (an age Observation is used if sent anyway)
        templates[c.feature.name] = (
            f"Observation?patient={{{{context.patientId}}}}&code={c.token}&_sort=-date&_count=1"
        )
    return templates


def discovery() -> Discovery:
    """The ``GET /cds-services`` document: one service on ``patient-view``."""
    codes = [
        FeatureCode(feature=c.feature.name, label=c.feature.label, system=c.system,
                    code=c.code, allowed=allowed_range(c.feature.name))
        for c in FEATURE_CODES
    ]
    service = CdsService(
        hook=HOOK,
        id=SERVICE_ID,
        title=f"{HORIZON_DAYS}-day mental-health crisis risk",
        description=(
            "Probability of a mental-health crisis within 30 days, its risk band and the "
            "features that drove it, from a model trained with differential privacy (DP-SGD). "
            "Needs the Patient (birthDate) and the latest PHQ-9 total score (LOINC 44261-6) and "
            "GAF, session count, substance use and prior crisis Observations (local code system "
            "https://dpcrisis.dev/fhir/CodeSystem/crisis-features); answers 412 when the "
            "prefetch lacks any of them."
        ),
        prefetch=_prefetch_templates(),
        usageRequirements="Send every prefetch key: the service does not query the FHIR server.",
        extension=ServiceExtension(feature_codes=codes),
    )
    return Discovery(services=[service])


def _checked_features(raw: dict[str, float]) -> dict[str, Any]:
    """The prefetched values through the same validation as /v1/risk, errors named by key."""
    try:
        return features_model(CRISIS_ENCODER).model_validate(raw).model_dump()
    except ValidationError as exc:
        errors = [
            {"field": f"prefetch.{e['loc'][0]}", "message": e["msg"],
             "allowed": (e.get("ctx") or {}).get("allowed")}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['field']}: {e['message']} (allowed {e['allowed']})"
                           for e in errors)
        raise InvalidRequest(detail, errors=errors) from None


def _summary(scored: RiskResult) -> str:
    text = (
        f"{scored.band.capitalize()} {HORIZON_DAYS}-day crisis risk: "
        f"{percent(scored.probability)} (DP model {scored.model.id})"
    )
    return text[: SUMMARY_LIMIT - 1]


def _detail(scored: RiskResult) -> str:
    low, high = (100 * t for t in cut_offs(scored.band_thresholds))
    lines = [
        f"**Probability of a mental-health crisis within {HORIZON_DAYS} days: "
        f"{percent(scored.probability)}**, risk band **{scored.band}** "
        f"(low < {low:g}% <= medium < {high:g}% <= high).",
        "",
        "Why, largest contribution first (exact Shapley values against the public reference "
        f"patient, {percent(scored.reference.probability)}):",
        "",
    ]
    for c in scored.contributions:
        points = 100 * c.contribution_probability
        lines.append(f"- {c.reason}: {c.direction} the risk ({points:+.1f} points)")
    model = scored.model
    lines += [
        "",
        f"Model {model.id} ({model.kind}, version {model.version}). {model.statement}",
    ]
    return "\n".join(lines)


def card(scored: RiskResult) -> Card:
    model = scored.model
    return Card(
        uuid=str(uuid.uuid4()),
        summary=_summary(scored),
        indicator=INDICATOR[Band(scored.band)],
        detail=_detail(scored),
        source=CardSource(
            label=SOURCE_LABEL,
            topic=Coding(system=MODEL_SYSTEM, code=f"model-{model.id}",
                         display=f"dpcrisis model {model.id} version {model.version}"),
        ),
    )


def evaluate(
    *, service_id: str, hook: str, patient_id: str,
    prefetch: dict[str, Any] | None, today: date,
) -> tuple[CdsResponse, int]:
    """Answer one hook call with one card, and the id of the model that scored (for the audit
    log).

    Raises:
        UnknownService: not this service's id (404).
        WrongHook: a hook other than patient-view (400).
        PrefetchIncomplete: features missing from the prefetch (412).
        InvalidRequest: a prefetched value the model cannot use (422).
    """
    if service_id != SERVICE_ID:
        raise UnknownService(f"no CDS service {service_id!r}; this server has {SERVICE_ID!r}")
    if hook != HOOK:
        raise WrongHook(f"service {SERVICE_ID} answers {HOOK!r}, not {hook!r}", field="hook",
                        allowed=HOOK)
    raw, _ = features_from_prefetch(prefetch, patient_id=patient_id, today=today)
    features = _checked_features(raw)
    scored = scoring_service.assess(features=features, model_id=None)
    return CdsResponse(cards=[card(scored)]), scored.model.id
