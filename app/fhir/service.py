"""A score as a FHIR R4 ``RiskAssessment`` (built from the same batch core as ``/v1/risk``).

Choices worth knowing:

- ``prediction[0].probabilityDecimal`` is the probability on a 0-1 scale (0.25 = 25%). R4's
  element comment speaks of percentages while its own examples use fractions, so a ``note``
  says which scale this is.
- ``code`` and ``prediction[0].outcome`` are the model's declared outcome (its schema's
  ``outcome``: its coding when declared, its label as text; ``app.fhir.codes``); nothing here
  names an outcome of its own.
- ``whenPeriod`` (from the assessment to ``horizon_days`` later) carries the outcome's declared
  horizon, and is left out when none is declared: R4 reads ``whenRange`` as an age range of
  the subject, so 0-30 days there would mean something else.
- ``probabilityDecimal`` has 3 significant digits, the model's real precision.
- ``qualitativeRisk`` has two codings: the HL7 risk-probability code read from the probability
  itself (``HL7_LIKELIHOOD``: ``high`` means more likely than not), then the service's own band
  (``BAND_SYSTEM``, served as a CodeSystem at ``/fhir/CodeSystem/risk-band``).
- ``identifier`` is derived from what was assessed (the model and its artifact, the subject,
  the features and their references, the day), so a retried request yields the same
  identifier and a FHIR server (or a conditional create) keeps one copy.
- a contained ``Device`` names the model (id, version, artifact SHA-256) and is the
  ``performer``; ``method`` codes the model too.
- ``basis`` has one Reference per feature of the scoring model's schema, in its order: to the
  Observation the caller named, else display only. Each carries the feature's coding (its
  declared code, else the local one: ``app.fhir.codes``) and the value scored as extensions,
  a categorical feature's value as its category (``valueString``), never as its index.
- a feature the request left out that the schema declares ``"missing": "reference"`` is scored
  at its reference value: its ``basis`` display says it was not given, and a ``note`` names
  every such input (none when all were given).
"""

import hashlib
import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from fastapi.exceptions import RequestValidationError

from app.bands import Band, cut_offs
from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind, FeatureSpec
from app.fhir.codes import (
    ARTIFACT_SYSTEM,
    BAND_SYSTEM,
    FEATURE_CODE_EXTENSION,
    FEATURE_VALUE_EXTENSION,
    MODEL_ID_SYSTEM,
    MODEL_SYSTEM,
    RISK_PROBABILITY,
    codes_of,
    outcome_concept,
)
from app.scoring import model_cache
from app.scoring import service as scoring_service
from app.scoring.model_cache import ScoringModel
from app.scoring.patients import check
from app.scoring.schemas import ContributionOut, RiskResult

FHIR_JSON = "application/fhir+json"
DEVICE_ID = "model"

HL7_LIKELIHOOD: tuple[tuple[float, str, str], ...] = (
    (0.5, "high", "High likelihood"),
    (0.1, "moderate", "Moderate likelihood"),
    (0.0, "low", "Low likelihood"),
)
"""Probability -> HL7 risk-probability (code, display): the first whose lower limit it reaches.

The HL7 codes have meanings of their own, read from the probability itself, never from our
bands: ``high`` is "more likely to occur than not" (p >= 0.5), ``moderate`` "a reasonable
likelihood" (from 1 in 10), ``low`` "possible but unlikely". ``negligible`` ("exceptionally
unlikely") and ``certain`` ("effectively guaranteed") are never used: a model trained with DP
noise on a rare outcome, checked on a few dozen held-out positives, cannot warrant either
claim. The service's own band (with its model's cut-offs) is the second coding.
"""
SIGNIFICANT_DIGITS = 3
"""The probability's real precision: DP noise and calibration on a few thousand held-out
records leave no meaning in a fourth significant digit."""


def _timestamp(value: datetime) -> str:
    return value.replace(microsecond=0).isoformat().replace("+00:00", "Z")


def percent(p: float) -> str:
    """A probability for people: one decimal, and "<0.1%" rather than a misleading "0.0%"."""
    return "<0.1%" if 0 < p < 0.0005 else f"{100 * p:.1f}%"


def rounded(p: float) -> float:
    """``p`` to ``SIGNIFICANT_DIGITS`` significant digits (0.123456 -> 0.123)."""
    return float(f"{p:.{SIGNIFICANT_DIGITS}g}")


def likelihood(p: float) -> tuple[str, str]:
    """The HL7 risk-probability (code, display) of a probability (``HL7_LIKELIHOOD``)."""
    return next((code, display) for lower, code, display in HL7_LIKELIHOOD if p >= lower)


def _qualitative_risk(p: float, band: Band, thresholds: Mapping[str, float]) -> dict[str, Any]:
    code, display = likelihood(p)
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
        "text": f"{band} risk band ({bounds}, on a 0-1 scale); HL7 {code}: "
                f"{display.lower()} (high means more likely than not)",
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
           references: Mapping[str, str] | None) -> tuple[RiskResult, ScoringModel]:
    """Score one patient with the named or active model; (score, that model: its schema and
    artifact hash).

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
    return scoring_service.score(features=features, model_id=model.id), model


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


def imputed_note(scored: RiskResult) -> list[dict[str, str]]:
    """A note naming the inputs scored at their reference value because they were not given
    (an empty list when none was)."""
    if not scored.imputed:
        return []
    labels = {c.feature: c.label for c in scored.contributions}
    listed = [f"{labels[name]} ({name})" for name in scored.imputed]
    return [{"text": "Imputed inputs: not given, so scored at the reference value the model's "
                     "schema declares for a missing value: " + ", ".join(listed) + "."}]


def assessment_identifier(*, model: ScoringModel, subject: str | None,
                          features: Mapping[str, Any], references: Mapping[str, str],
                          day: str) -> dict[str, str]:
    """A URN that a retry of the same assessment (same model and artifact, subject, features,
    references, UTC day) gets again; any change gives another."""
    content = json.dumps({"model": model.id, "artifact": model.artifact_sha256,
                          "subject": subject, "features": dict(features),
                          "references": dict(references), "day": day},
                         sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(content.encode("utf-8")).digest()
    name = uuid.UUID(bytes=digest[:16], version=5)
    return {"system": "urn:ietf:rfc:3986", "value": f"urn:uuid:{name}"}


def model_device(model: ScoringModel) -> dict[str, Any]:
    """The model as a contained Device: its id, version and artifact hash."""
    block = model.block
    name = f"dpcrisis {block['kind']} model {model.id}"
    return {
        "resourceType": "Device",
        "id": DEVICE_ID,
        "identifier": [{"system": MODEL_ID_SYSTEM, "value": str(model.id)},
                       {"system": ARTIFACT_SYSTEM, "value": model.artifact_sha256}],
        "deviceName": [{"name": name, "type": "model-name"}],
        "type": {"text": "risk model trained with differential privacy (DP-SGD)"},
        "version": [{"type": {"text": "model version"}, "value": str(block["version"])},
                    {"type": {"text": "artifact SHA-256"}, "value": model.artifact_sha256}],
    }


def risk_assessment(
    *,
    scored: RiskResult,
    model: ScoringModel,
    subject: str | None,
    features: Mapping[str, Any],
    references: Mapping[str, str] | None = None,
    now: datetime,
) -> dict[str, Any]:
    """The RiskAssessment for one answer of ``scoring.service.score`` (never stored).

    Args:
        scored: the single-patient score (probability, band, contributions, model, reference).
        model: the model that scored (``basis``: its schema's features and codes; ``code`` and
            the prediction: its schema's outcome; the Device).
        subject: ``Patient/<id>`` (or ``Group/<id>``); without it the subject is display-only.
        features: the features as the request gave them (the identifier's content).
        references: feature name -> ``Observation/<id>`` the value came from, when known.
        now: when the assessment was made (``occurrenceDateTime``, start of ``whenPeriod``).
    """
    statement = scored.model
    occurred = _timestamp(now)
    references = references or {}
    schema = model.encoder.schema
    method_text = (
        f"dpcrisis {statement.kind} model {statement.id} (version {statement.version}), "
        f"DP-SGD; exact Shapley explanations"
    )
    return {
        "resourceType": "RiskAssessment",
        "contained": [model_device(model)],
        "identifier": [assessment_identifier(model=model, subject=subject, features=features,
                                             references=references, day=occurred[:10])],
        "status": "final",
        "method": {
            "coding": [{"system": MODEL_SYSTEM, "code": f"model-{statement.id}",
                        "display": method_text}],
            "text": method_text,
        },
        "code": outcome_concept(schema),
        "subject": {"reference": subject} if subject else {"display": "patient not identified"},
        "occurrenceDateTime": occurred,
        "performer": {"reference": f"#{DEVICE_ID}",
                      "display": f"dpcrisis model {statement.id}"},
        "basis": _basis(scored.contributions, schema, references),
        "prediction": [_prediction(scored, schema, now)],
        "note": [
            {"text": statement.statement},
            {"text": "probabilityDecimal is a probability on a 0-1 scale (0.25 means 25%), "
                     f"not a percentage, to {SIGNIFICANT_DIGITS} significant digits."},
            *imputed_note(scored),
        ],
    }


def when_period(horizon_days: int | None, now: datetime) -> dict[str, str] | None:
    """The prediction's window: from ``now`` to ``horizon_days`` later; None without a declared
    horizon (an outcome with no window gets no ``whenPeriod``, never a made-up one)."""
    if horizon_days is None:
        return None
    return {"start": _timestamp(now), "end": _timestamp(now + timedelta(days=horizon_days))}


def _prediction(scored: RiskResult, schema: DatasetSchema, now: datetime) -> dict[str, Any]:
    prediction: dict[str, Any] = {
        "outcome": outcome_concept(schema),
        "probabilityDecimal": rounded(scored.probability),
        "qualitativeRisk": _qualitative_risk(scored.probability, Band(scored.band),
                                             scored.band_thresholds),
    }
    period = when_period(schema.outcome.horizon_days, now)
    if period is not None:
        prediction["whenPeriod"] = period
    prediction["rationale"] = _rationale(scored.contributions, scored.reference.probability)
    return prediction
