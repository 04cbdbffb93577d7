"""A score as a FHIR R4 ``RiskAssessment`` (built from the same batch core as ``/v1/risk``).

Choices worth knowing:

- ``prediction[0].probabilityDecimal`` is the probability on a 0-1 scale (0.25 = 25%). R4's
  element comment speaks of percentages while its own examples use fractions, so a ``note``
  says which scale this is.
- ``whenPeriod`` (from the assessment to 30 days later) carries the horizon: R4 reads
  ``whenRange`` as an age range of the subject, so 0-30 days there would mean something else.
- ``qualitativeRisk`` codes the band twice: the service's own band (``BAND_SYSTEM``), and the
  nearest HL7 risk-probability code (see ``QUALITATIVE``).
- ``basis`` has one Reference per feature of the scoring model's schema, in its order: to the
  Observation the caller named, else display only. Each carries the feature's coding (its
  declared code, else the local one: ``app.fhir.codes``) and the value scored as extensions,
  a categorical feature's value as its category (``valueString``), never as its index.
"""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from fastapi.exceptions import RequestValidationError

from app.bands import Band, cut_offs
from app.datasets.dataset_schema import DatasetSchema, FeatureKind, FeatureSpec
from app.fhir.codes import (
    BAND_SYSTEM,
    FEATURE_CODE_EXTENSION,
    FEATURE_VALUE_EXTENSION,
    HORIZON_DAYS,
    MODEL_SYSTEM,
    OUTCOME_TEXT,
    RISK_PROBABILITY,
    codes_of,
)
from app.scoring import model_cache
from app.scoring import service as scoring_service
from app.scoring.patients import check
from app.scoring.schemas import ContributionOut, RiskResult

FHIR_JSON = "application/fhir+json"

QUALITATIVE: dict[Band, tuple[str, str]] = {
    Band.LOW: ("low", "Low likelihood"),
    Band.MEDIUM: ("moderate", "Moderate likelihood"),
    Band.HIGH: ("high", "High likelihood"),
}
"""Band -> HL7 risk-probability (code, display).

That code system has negligible / low / moderate / high / certain. ``negligible``
("exceptionally unlikely") and ``certain`` ("effectively guaranteed") are never used: a model
trained with DP noise on a rare outcome, checked on a few dozen held-out positives, cannot
warrant either claim, and our low band (below 5% by default) is "possible but unlikely", not
negligible. low -> low and medium -> moderate ("a reasonable likelihood") match their
definitions. HL7 defines ``high`` as "more likely to occur than not", while our high band starts
at 20% by default (10x the ~2% base rate): the band's own coding and the text carry the exact
threshold so nobody reads "high" as "over 50%".
"""


def _timestamp(value: datetime) -> str:
    return value.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def percent(p: float) -> str:
    """A probability for people: one decimal, and "<0.1%" rather than a misleading "0.0%"."""
    return "<0.1%" if 0 < p < 0.0005 else f"{100 * p:.1f}%"


def _qualitative_risk(band: Band, thresholds: Mapping[str, float]) -> dict[str, Any]:
    code, display = QUALITATIVE[band]
    low, high = cut_offs(thresholds)
    bounds = {
        Band.LOW: f"probability < {low:g}",
        Band.MEDIUM: f"{low:g} <= probability < {high:g}",
        Band.HIGH: f"probability >= {high:g}",
    }[band]
    return {
        "coding": [
            {"system": RISK_PROBABILITY, "code": code, "display": display},
            {"system": BAND_SYSTEM, "code": band, "display": f"{band} risk band ({bounds})"},
        ],
        "text": f"{band} risk band ({bounds}, on a 0-1 scale)",
    }


def basis_errors(schema: DatasetSchema, references: Mapping[str, str]) -> list[dict[str, Any]]:
    """A validation error for each ``basis`` key that is not a feature of ``schema``."""
    names = schema.feature_names
    allowed = f"features: {', '.join(names)}"
    return [
        {"type": "unknown_feature", "loc": ("body", "basis", key), "input": None,
         "msg": "not a feature of the scoring model's schema", "ctx": {"allowed": allowed}}
        for key in references if key not in names
    ]


def assess(*, features: Mapping[str, Any], model_id: int | None,
           references: Mapping[str, str] | None) -> tuple[RiskResult, DatasetSchema]:
    """Score one patient with the named or active model; (score, that model's schema).

    Raises:
        ModelNotFound: no such model, or none trained yet (404).
        NoActiveModel: no model named and none active (409).
        RequestValidationError: features or ``basis`` keys the model's schema does not allow
            (422, every one named: ``features.sex``, ``basis.bmi``).
    """
    model = model_cache.resolve(model_id)
    schema = model.encoder.schema
    unknown = basis_errors(schema, references or {})
    if unknown:
        _, errors = check(model.encoder, [features], scoring_service.single_path)
        raise RequestValidationError([*errors, *unknown])
    return scoring_service.assess(features=features, model_id=model.id), schema


def value_element(feature: FeatureSpec, value: float | str) -> dict[str, Any]:
    """A scored value as a FHIR ``value[x]``: a category as text, never as its index."""
    if feature.kind is FeatureKind.CATEGORICAL:
        return {"valueString": str(value)}
    number = float(value)
    if feature.kind is FeatureKind.BINARY:
        return {"valueBoolean": number >= 0.5}
    if feature.kind is FeatureKind.INTEGER:
        return {"valueInteger": int(number)}
    return {"valueDecimal": number}


def _basis(contributions: list[ContributionOut], schema: DatasetSchema,
           references: Mapping[str, str]) -> list[dict[str, Any]]:
    """One Reference per feature: to the Observation when the caller named it, else display
    only; its coding and the value scored as extensions."""
    by_name = {c.feature: c for c in contributions}
    basis = []
    for code in codes_of(schema):
        name = code.feature.name
        scored = by_name[name]
        item: dict[str, Any] = {
            "extension": [
                {"url": FEATURE_CODE_EXTENSION,
                 "valueCoding": {"system": code.system, "code": code.code,
                                 "display": code.display}},
                {"url": FEATURE_VALUE_EXTENSION, **value_element(code.feature, scored.value)},
            ],
            "type": "Observation",
            "display": f"{scored.reason} ({code.token})",
        }
        if name in references:
            item["reference"] = references[name]
        basis.append(item)
    return basis


def _rationale(contributions: list[ContributionOut], base_probability: float) -> str:
    parts = [
        f"{c.reason} ({c.direction} the risk by "
        f"{100 * abs(c.contribution_probability):.1f} percentage points)"
        for c in contributions
        if c.direction != "neutral"
    ]
    listed = "; ".join(parts) if parts else "no feature differs from the reference patient"
    return (
        f"Exact Shapley contributions against the public reference patient "
        f"({percent(base_probability)}), largest first: {listed}."
    )


def risk_assessment(
    *,
    scored: RiskResult,
    schema: DatasetSchema,
    subject: str | None,
    references: Mapping[str, str] | None = None,
    now: datetime,
) -> dict[str, Any]:
    """The RiskAssessment for one result of ``scoring.service.assess`` (never stored).

    Args:
        scored: the single-patient score (probability, band, contributions, model, reference).
        schema: the scoring model's declared schema (``basis``: its features and codes).
        subject: ``Patient/<id>`` (or ``Group/<id>``); without it the subject is display-only.
        references: feature name -> ``Observation/<id>`` the value came from, when known.
        now: when the assessment was made (``occurrenceDateTime``, start of ``whenPeriod``).
    """
    model = scored.model
    occurred = _timestamp(now)
    method_text = (
        f"dpcrisis {model.kind} model {model.id} (version {model.version}), "
        f"DP-SGD; exact Shapley explanations"
    )
    return {
        "resourceType": "RiskAssessment",
        "status": "final",
        "method": {
            "coding": [{"system": MODEL_SYSTEM, "code": f"model-{model.id}",
                        "display": method_text}],
            "text": method_text,
        },
        "code": {"text": f"{HORIZON_DAYS}-day mental-health crisis risk"},
        "subject": {"reference": subject} if subject else {"display": "patient not identified"},
        "occurrenceDateTime": occurred,
        "performer": {"type": "Device", "display": f"dpcrisis model {model.id}"},
        "basis": _basis(scored.contributions, schema, references or {}),
        "prediction": [
            {
                "outcome": {"text": OUTCOME_TEXT},
                "probabilityDecimal": scored.probability,
                "qualitativeRisk": _qualitative_risk(Band(scored.band), scored.band_thresholds),
                "whenPeriod": {
                    "start": occurred,
                    "end": _timestamp(now + timedelta(days=HORIZON_DAYS)),
                },
                "rationale": _rationale(scored.contributions, scored.reference.probability),
            }
        ],
        "note": [
            {"text": model.statement},
            {"text": "probabilityDecimal is a probability on a 0-1 scale (0.25 means 25%), "
                     "not a percentage."},
        ],
    }
