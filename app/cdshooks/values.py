"""An Observation's value as a feature of the model takes it.

Numeric and integer features from valueQuantity / valueInteger; yes/no features from
valueBoolean or a yes/no valueCodeableConcept (numbers 0/1 too); categorical features from a
valueCodeableConcept whose coding's code or text is a category, or a valueString.
"""

from collections.abc import Mapping
from typing import Any

from app.cdshooks.resources import as_object, codings_of
from app.datasets.schema.dataset_schema import FeatureKind, FeatureSpec

YES_CODES = {"Y", "y", "yes", "true", "373066001"}  # HL7 v2-0136 Y, SNOMED CT 373066001 |Yes|
NO_CODES = {"N", "n", "no", "false", "373067005"}  # HL7 v2-0136 N, SNOMED CT 373067005 |No|

Value = float | str
"""A prefetched value as the model's features take it (a categorical feature: its category)."""

EXPECTED = {
    FeatureKind.NUMERIC: "valueQuantity or valueInteger",
    FeatureKind.INTEGER: "valueQuantity or valueInteger",
    FeatureKind.BINARY: "valueBoolean, a yes/no valueCodeableConcept, or 0/1",
    FeatureKind.CATEGORICAL: "valueCodeableConcept or valueString naming a category",
}
"""What an Observation's value must be, by the feature's kind (named in a 422)."""


def _yes_no(concept: Any) -> float | None:
    tokens = [str(c.get("code")) for c in codings_of(concept)]
    tokens.append(str(as_object(concept).get("text", "")).strip().lower())
    if any(t in YES_CODES for t in tokens):
        return 1.0
    if any(t in NO_CODES for t in tokens):
        return 0.0
    return None


def _category(observation: Mapping[str, Any], feature: FeatureSpec) -> str | None:
    """The category a valueCodeableConcept (a coding's code, else its text) or valueString
    names: exactly, else ignoring case where that is unambiguous."""
    if "valueString" in observation:
        candidates = [observation["valueString"]]
    else:
        concept = as_object(observation.get("valueCodeableConcept"))
        candidates = [c.get("code") for c in codings_of(concept)] + [concept.get("text")]
    return category_of(candidates, feature)


def category_of(candidates: list[Any], feature: FeatureSpec) -> str | None:
    """The category the first of ``candidates`` that names one names: exactly, else ignoring
    case where that is unambiguous."""
    texts = [c.strip() for c in candidates if isinstance(c, str)]
    categories = feature.categories or []
    for text in texts:
        if text in categories:
            return text
    for text in texts:
        same = [c for c in categories if c.casefold() == text.casefold()]
        if len(same) == 1:
            return same[0]
    return None


def observation_value(observation: Mapping[str, Any], feature: FeatureSpec) -> Value | None:
    """The observation's value as the model takes it, or None when it has none it can use."""
    binary = feature.kind is FeatureKind.BINARY
    if feature.kind is FeatureKind.CATEGORICAL:
        return _category(observation, feature)
    if "valueQuantity" in observation:
        value = as_object(observation["valueQuantity"]).get("value")
    elif "valueInteger" in observation:
        value = observation["valueInteger"]
    elif "valueBoolean" in observation:
        value = observation["valueBoolean"]
    elif "valueCodeableConcept" in observation:
        return _yes_no(observation["valueCodeableConcept"]) if binary else None
    else:
        return None
    if isinstance(value, bool):  # yes/no only for yes/no features: true is not a PHQ-9 of 1
        return None if not binary else 1.0 if value else 0.0
    return float(value) if isinstance(value, int | float) else None


def element_value(raw: Any, feature: FeatureSpec) -> Value | None:
    """The value of a FHIR element a schema's value path names, as the model takes it: a number
    or a Quantity for numbers; a boolean, 0/1, a yes/no code or concept for yes/no; a string,
    code, Coding or CodeableConcept naming a category. None: not a value the model can use."""
    concept = as_object(raw)
    if feature.kind is FeatureKind.CATEGORICAL:
        codings = [concept, *codings_of(concept)] if concept else []
        return category_of([raw, *(c.get("code") for c in codings), concept.get("text")],
                           feature)
    if feature.kind is FeatureKind.BINARY:
        if isinstance(raw, bool):
            return 1.0 if raw else 0.0
        if isinstance(raw, int | float) and raw in (0, 1):
            return float(raw)
        text = raw if isinstance(raw, str) else concept.get("code")
        if isinstance(text, str):
            return 1.0 if text.strip() in YES_CODES else 0.0 if text.strip() in NO_CODES else None
        return _yes_no(concept) if concept else None
    value = concept.get("value") if concept else raw
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
