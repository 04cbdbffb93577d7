"""The rules of a declared schema that relate its fields to each other (``check_schema``).

Pydantic parses the shape (``app.datasets.schema.dataset_schema``: types, unknown fields,
free-text lengths); each rule here is a 422 naming the field as the API contract writes it
(``schema.features[2].upper``) with what is allowed.
"""

import re

from app.core.errors import InvalidRequest
from app.core.schemas import NO_CONTROL_CHARACTERS
from app.datasets.schema.dataset_schema import (
    MAX_ATTRIBUTES,
    MAX_CATEGORIES,
    MAX_CATEGORY_CHARS,
    MAX_FEATURES,
    NAME_PATTERN,
    RESERVED_NAMES,
    DatasetSchema,
    FeatureKind,
    FeatureSpec,
    Outcome,
    SeverityBand,
)

_NAME = re.compile(NAME_PATTERN)


def _fail(field: str, detail: str, allowed: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {detail}", field=field, allowed=allowed)


def _check_name(name: str, field: str, taken: dict[str, str], *, reserved: bool = True) -> None:
    if not _NAME.fullmatch(name):
        raise _fail(field, f"{name!r} is not a valid column name", NAME_PATTERN)
    if reserved and name in RESERVED_NAMES:
        raise _fail(field, f"{name!r} is reserved", f"any name but {sorted(RESERVED_NAMES)}")
    if name in taken:
        raise _fail(field, f"{name!r} is already used by {taken[name]}", "a unique name")
    taken[name] = field


def _check_categories(categories: list[str] | None, field: str) -> list[str]:
    if not categories or len(categories) < 2 or len(categories) > MAX_CATEGORIES:
        raise _fail(field, "needs 2 to 50 categories", f"[2, {MAX_CATEGORIES}] categories")
    for i, category in enumerate(categories):
        text_ok = 0 < len(category) <= MAX_CATEGORY_CHARS
        if not text_ok or re.fullmatch(NO_CONTROL_CHARACTERS, category) is None:
            raise _fail(f"{field}[{i}]", "a category is 1 to 64 printable characters",
                        f"1 to {MAX_CATEGORY_CHARS} characters")
        if category in categories[:i]:
            raise _fail(f"{field}[{i}]", f"duplicate category {category!r}", "unique categories")
    return categories


def _refuse_extras(feature: FeatureSpec, at: str, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(feature, name) is not None:
            raise _fail(f"{at}.{name}", f"not used by a {feature.kind} feature", "absent")


def _check_bounded(feature: FeatureSpec, at: str) -> None:
    """Numeric and integer features: public bounds, model range and reference inside them."""
    _refuse_extras(feature, at, ("categories",))
    whole = feature.kind is FeatureKind.INTEGER
    for side in ("lower", "upper"):
        value = getattr(feature, side)
        if value is None:
            raise _fail(f"{at}.{side}", f"required for a {feature.kind} feature", "a number")
        if whole and not float(value).is_integer():
            raise _fail(f"{at}.{side}", "must be a whole number", "whole numbers")
    lower, upper = float(feature.lower), float(feature.upper)  # type: ignore[arg-type]
    if lower >= upper:
        raise _fail(f"{at}.upper", f"must be above lower ({lower:g})", f"({lower:g}, inf)")
    span = f"[{lower:g}, {upper:g}]"
    model_lower, model_upper = feature.model_range
    for side, value in (("model_lower", model_lower), ("model_upper", model_upper)):
        if not lower <= value <= upper:
            raise _fail(f"{at}.{side}", "the model range must lie within the bounds", span)
    if model_lower >= model_upper:
        raise _fail(f"{at}.model_upper", "the model range is empty",
                    f"({model_lower:g}, {upper:g}]")
    reference = feature.reference
    if isinstance(reference, str) or not lower <= reference <= upper:
        raise _fail(f"{at}.reference", "must be a number within the bounds", span)
    if whole and not float(reference).is_integer():
        raise _fail(f"{at}.reference", "must be a whole number", f"whole numbers in {span}")
    _check_bands(feature.severity_bands or [], f"{at}.severity_bands", lower, upper)


def _check_bands(bands: list[SeverityBand], at: str, lower: float, upper: float) -> None:
    """Ascending, non-overlapping bands inside the bounds."""
    previous: float | None = None
    for i, band in enumerate(bands):
        floor = lower if previous is None else previous
        starts_after = previous is None or band.from_ > previous
        if not (starts_after and floor <= band.from_ <= band.to <= upper):
            raise _fail(f"{at}[{i}]", "bands ascend without overlap, within the bounds",
                        f"{floor:g} <= from <= to <= {upper:g}, from above the last band's to")
        previous = band.to


def _check_feature(feature: FeatureSpec, at: str) -> None:
    if feature.kind in (FeatureKind.NUMERIC, FeatureKind.INTEGER):
        _check_bounded(feature, at)
        return
    _refuse_extras(feature, at, ("model_lower", "model_upper", "severity_bands"))
    if feature.kind is FeatureKind.BINARY:
        _refuse_extras(feature, at, ("categories",))
        for side, value in (("lower", feature.lower), ("upper", feature.upper)):
            if value is not None and value != {"lower": 0, "upper": 1}[side]:
                raise _fail(f"{at}.{side}", "a binary feature is 0 or 1", "absent, or 0 / 1")
        if isinstance(feature.reference, str) or feature.reference not in (0, 1):
            raise _fail(f"{at}.reference", "must be 0 or 1", "0 or 1")
        return
    _refuse_extras(feature, at, ("lower", "upper"))
    categories = _check_categories(feature.categories, f"{at}.categories")
    if feature.reference not in categories:
        raise _fail(f"{at}.reference", "must be one of the categories",
                    f"one of {categories}")


def _check_subgroups(schema: DatasetSchema, at: str) -> None:
    eligible = [f.name for f in schema.features
                if f.kind in (FeatureKind.BINARY, FeatureKind.CATEGORICAL)]
    eligible += [a.name for a in schema.attributes]
    numeric = {f.name for f in schema.features} - set(eligible)
    for i, name in enumerate(schema.subgroups):
        field = f"{at}.subgroups[{i}]"
        if name in numeric:
            raise _fail(field, f"{name!r} is not binary or categorical", f"one of {eligible}")
        if name not in eligible:
            raise _fail(field, f"unknown column {name!r}", f"one of {eligible}")
        if name in schema.subgroups[:i]:
            raise _fail(field, f"{name!r} is listed twice", "unique names")


def _check_outcome(outcome: Outcome, at: str, *, upload: bool) -> None:
    """An upload names its outcome and declares its bands: nothing else would say what the model
    predicts or when a patient is high risk (the built-in crisis wording must never stand in)."""
    if upload and outcome.label is None:
        raise _fail(f"{at}.label", "an upload names its outcome as a person reads it "
                    "(it titles FHIR assessments, CDS cards and reports)",
                    "1 to 200 printable characters")
    if upload and outcome.bands is None:
        raise _fail(f"{at}.bands", "an upload declares its risk bands (public clinical policy: "
                    "the probabilities from which a patient is medium, and high risk)",
                    '{"low_medium": p1, "medium_high": p2}, 0 < p1 < p2 < 1')
    bands = outcome.bands
    if bands is not None and not bands.low_medium < bands.medium_high:
        raise _fail(f"{at}.bands.medium_high",
                    f"must lie above low_medium ({bands.low_medium:g})",
                    f"({bands.low_medium:g}, 1)")


def check_schema(schema: DatasetSchema, *, at: str = "schema", upload: bool = False) -> None:
    """Apply the declaration's rules; the first broken one is an ``InvalidRequest`` (422).
    ``at``: the schema's path in the request body, prefixed to every field named; ``upload``:
    a new upload's, which must also label its outcome and declare its bands (schemas stored
    before those fields existed still read)."""
    if not 1 <= len(schema.features) <= MAX_FEATURES:
        raise _fail(f"{at}.features", "needs 1 to 200 features", f"[1, {MAX_FEATURES}] features")
    if len(schema.attributes) > MAX_ATTRIBUTES:
        raise _fail(f"{at}.attributes", "at most 20 attributes", f"[0, {MAX_ATTRIBUTES}]")
    taken: dict[str, str] = {}
    for i, feature in enumerate(schema.features):
        _check_name(feature.name, f"{at}.features[{i}].name", taken)
        _check_feature(feature, f"{at}.features[{i}]")
    for i, attribute in enumerate(schema.attributes):
        _check_name(attribute.name, f"{at}.attributes[{i}].name", taken)
        _check_categories(attribute.categories, f"{at}.attributes[{i}].categories")
    _check_name(schema.outcome.name, f"{at}.outcome.name", taken)
    _check_outcome(schema.outcome, f"{at}.outcome", upload=upload)
    if schema.id_column is not None:
        _check_name(schema.id_column, f"{at}.id_column", taken, reserved=False)
    elif schema.id_kind != "text":
        raise _fail(f"{at}.id_kind", "needs an id_column (without one, ids are row numbers)",
                    '"text" (or absent) without id_column; "integer" only with one')
    _check_subgroups(schema, at)
