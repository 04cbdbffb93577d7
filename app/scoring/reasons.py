"""Plain-language reasons a clinician reads next to a contribution, from the declared schema.

"PHQ-9 22: severe depressive symptoms (20-27)" (a declared severity band), "Age 40 years",
"12 sessions in the last 12 months" (a unit that already names the feature), "substance use
recorded" / "no substance use recorded" (binary), "Sex: female" (categorical); a feature the
patient did not give, scored at its reference: "Sleep not given: scored at the reference value
7.5 hours a night".
"""

from typing import Any

from app.datasets.schema.dataset_schema import FeatureKind, FeatureSpec

Shown = float | str
"""A feature value as a contribution shows it: the number, or a categorical feature's category."""


def _lower_first(label: str) -> str:
    """'Substance use' -> 'substance use'; an acronym ('PHQ-9', 'GAF') keeps its case."""
    if len(label) > 1 and label[1].isupper():
        return label
    return label[:1].lower() + label[1:]


def shown_value(feature: FeatureSpec, value: float) -> Shown:
    """The raw value (a categorical feature's index) as the answer shows it."""
    if feature.kind is FeatureKind.CATEGORICAL:
        return (feature.categories or [])[int(value)]
    return value


def severity_of(feature: FeatureSpec, value: float) -> dict[str, Any] | None:
    for band in feature.severity_bands or ():
        if band.from_ <= value <= band.to:
            return {"label": band.label, "from": band.model_dump()["from"],
                    "to": band.model_dump()["to"]}
    return None


def reason_of(feature: FeatureSpec, value: float) -> str:
    label = feature.label or feature.name
    if feature.kind is FeatureKind.BINARY:
        text = f"{_lower_first(label)} recorded"
        return text if value >= 0.5 else f"no {text}"
    if feature.kind is FeatureKind.CATEGORICAL:
        return f"{label}: {shown_value(feature, value)}"
    band = severity_of(feature, value)
    if band is not None:
        return f"{label} {value:g}: {band['label']} ({band['from']:g}-{band['to']:g})"
    unit = feature.unit or ""
    if unit.lower().startswith(label.lower()):
        return f"{value:g} {unit}"
    return f"{label} {value:g} {unit}".strip()


def imputed_reason(feature: FeatureSpec, value: float) -> str:
    """The reason of a feature scored at its reference ``value`` because it was not given."""
    label = feature.label or feature.name
    if feature.kind is FeatureKind.BINARY:
        shown = "yes" if value >= 0.5 else "no"
    elif feature.kind is FeatureKind.CATEGORICAL:
        shown = str(shown_value(feature, value))
    else:
        shown = f"{value:g} {feature.unit or ''}".strip()
    return f"{label} not given: scored at the reference value {shown}"
