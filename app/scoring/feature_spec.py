"""``GET /v1/features``: a schema's features as clients read them to build a form or a request.

The shape predates declared schemas (name, label, unit, type, minimum, maximum, model_range,
reference, loinc, severity_bands) and keeps it; ``categories``, ``code`` and ``missing`` are
added (``missing``: "reference" when a request may leave the feature out, which is then scored
at its reference value; "error" when it is required).
"""

from typing import Any

from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind, FeatureSpec
from app.scoring.patients import allowed_of

LOINC = "http://loinc.org"


def _entry(f: FeatureSpec) -> dict[str, Any]:
    document = f.model_dump(mode="json")
    lower, upper = f.bounds
    model_lower, model_upper = f.model_range
    categorical = f.kind is FeatureKind.CATEGORICAL
    code = document["code"]
    return {
        "name": f.name,
        "label": f.label or f.name,
        "unit": f.unit or "",
        "type": f.kind.value,
        "minimum": None if categorical else _whole(lower),
        "maximum": None if categorical else _whole(upper),
        "model_range": None if categorical else [_whole(model_lower), _whole(model_upper)],
        "categories": f.categories,
        "reference": document["reference"],
        "missing": f.missing,
        "allowed": allowed_of(f),
        "code": code,
        "loinc": code["code"] if code and code["system"] == LOINC else None,
        "severity_bands": document["severity_bands"] or [],
    }


def _whole(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def feature_document(schema: DatasetSchema) -> list[dict[str, Any]]:
    """The schema's features in declaration order (the order of a CSV export)."""
    return [_entry(f) for f in schema.features]
