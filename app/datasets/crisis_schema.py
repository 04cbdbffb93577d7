"""The built-in generator's schema: ``app.features`` written as a declared schema.

It is one example of a declared schema, and the only place the crisis outcome is worded (its
label, horizon, coding and bands); every output reads a model's own schema, so a clinic's model
of another outcome never shows these words.
"""

from app.datasets import synthetic
from app.datasets.dataset_schema import (
    Attribute,
    Code,
    DatasetSchema,
    FeatureSpec,
    Outcome,
    OutcomeBands,
    schema_hash,
)
from app.features import FEATURES, Feature


def _crisis_feature(f: Feature) -> FeatureSpec:
    spec: dict[str, object] = {
        "name": f.name, "label": f.label, "kind": f.kind, "unit": f.unit or None,
        "reference": f.reference,
    }
    if f.kind == "integer":
        spec |= {"lower": f.lower, "upper": f.upper, "model_upper": f.model_upper}
    if f.severities:
        spec["severity_bands"] = [
            {"from": s.lower, "to": s.upper, "label": s.label} for s in f.severities
        ]
    if f.loinc:
        spec["code"] = {"system": LOINC, "code": f.loinc, "display": LOINC_DISPLAY[f.loinc]}
    return FeatureSpec.model_validate(spec)


LOINC = "http://loinc.org"
LOINC_DISPLAY = {
    "30525-0": "Age",
    "44261-6": "Patient Health Questionnaire 9 item (PHQ-9) total score [Reported]",
}

CRISIS_SCHEMA = DatasetSchema(
    features=[_crisis_feature(f) for f in FEATURES],
    outcome=Outcome(
        name="crisis_30d", label="Crisis within 30 days", positive=1,
        horizon_days=30,
        code=Code(system="https://dpcrisis.dev/fhir/CodeSystem/crisis-outcome",
                  code="crisis-30d", display="Mental-health crisis within 30 days"),
        description="A mental-health crisis (emergency presentation, crisis-team contact or "
                    "self-harm) within 30 days of the assessment; the seed article's generator.",
        bands=OutcomeBands(low_medium=0.05, medium_high=0.20),
    ),
    attributes=[Attribute(name="sex", label="Sex", categories=list(synthetic.SEX_CATEGORIES))],
    subgroups=["sex"],
)
"""The built-in generator's schema (``app.features`` as a declaration). ``sex`` is a
subgroup-only attribute: the generator draws it apart from the outcome and the model never sees
it. The generator's age-band subgroup needs public bins on an integer feature, which this
contract does not have yet; its ids are the generated table's indices, so no ``id_column``."""

LEGACY_CRISIS_HASH = schema_hash(CRISIS_SCHEMA.model_copy(update={"outcome": Outcome(
    name="crisis_30d", label="Crisis within 30 days", positive=1)}))
"""The crisis schema's hash before its outcome declared a horizon, code and bands: models and
datasets of the generator stored then carry it, and read as ``CRISIS_SCHEMA``."""
