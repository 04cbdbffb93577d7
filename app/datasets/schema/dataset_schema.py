"""The declared schema of a dataset: the one source of truth for its columns.

Ingestion validates uploaded rows against it; scaling, explanations, FHIR, CDS Hooks and the
dashboard form read it. Bounds, model ranges and reference values are *public* (instrument
ranges, declared caps, a clinically ordinary patient), never statistics of the private data.

Pydantic parses the shape (types, unknown fields, free-text lengths); ``check_schema`` applies
the rules that relate fields to each other, each as a 422 naming the field as the API contract
writes it (``schema.features[2].upper``) with what is allowed.

Subgroup-only columns (``attributes``): a fairness breakdown may need a column the model must
not see (the generator's ``sex``). Such a column is declared under ``attributes`` with its
categories; it is validated and stored but is not a model feature. ``subgroups`` names binary or
categorical features or attributes.

Without ``id_column`` each row's id is its 1-based row number at ingestion, so a patient's
train/calibration/evaluation part depends on row order: re-uploading the same patients in
another order moves them between parts. A stable id column is strongly recommended; its
``id_kind`` says which spellings are one patient (one canonical text: ``intake.id_rules``).
"""

import hashlib
import json
import re
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_serializer

from app.core.errors import InvalidRequest
from app.core.schemas import NO_CONTROL_CHARACTERS, RequestModel
from app.datasets.schema.feature_prefetch import FeaturePrefetch

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
MAX_FEATURES, MAX_CATEGORIES, MAX_CATEGORY_CHARS, MAX_ATTRIBUTES = 200, 50, 64, 20
RESERVED_NAMES = frozenset(
    {"id", "part", "probability", "log_odds", "band", "contributions", "intercept", "model_id"}
)
"""Keys the service itself writes next to feature values (scoring results, exports, model
artifacts); a column of that name would be ambiguous there. Names starting with ``_`` are
excluded by the pattern and left to the service (the stored table's ``_id``)."""

_NAME = re.compile(NAME_PATTERN)


def _free_text(max_length: int = 200) -> Any:
    """An optional one-line text (label, unit, display)."""
    return Field(default=None, max_length=max_length, pattern=NO_CONTROL_CHARACTERS)


class FeatureKind(StrEnum):
    NUMERIC = "numeric"
    INTEGER = "integer"
    BINARY = "binary"
    CATEGORICAL = "categorical"


class Code(RequestModel):
    """A clinical code for the column (e.g. LOINC), shown in FHIR resources."""

    system: str = Field(min_length=1, max_length=200, pattern=NO_CONTROL_CHARACTERS)
    code: str = Field(min_length=1, max_length=64, pattern=NO_CONTROL_CHARACTERS)
    display: str | None = _free_text()


class SeverityBand(RequestModel):
    """A published band of an instrument (e.g. PHQ-9 20-27 "severe"), inclusive on both ends;
    scoring names it next to a value in its reasons."""

    model_config = ConfigDict(serialize_by_alias=True)

    from_: float = Field(alias="from")
    to: float
    label: str = Field(min_length=1, max_length=120, pattern=NO_CONTROL_CHARACTERS)

    @field_serializer("from_", "to")
    def _whole(self, value: float) -> float | int:
        return int(value) if float(value).is_integer() else value


class FeatureSpec(RequestModel):
    """One model feature: its kind, public bounds and the public reference patient's value."""

    name: str
    kind: FeatureKind
    label: str | None = _free_text()
    unit: str | None = _free_text(64)
    lower: float | None = None
    upper: float | None = None
    model_lower: float | None = Field(default=None, description="scaling range, within bounds")
    model_upper: float | None = Field(default=None, description="values above count as this")
    categories: list[str] | None = None
    reference: float | str
    code: Code | None = None
    prefetch: FeaturePrefetch | None = Field(default=None, exclude_if=lambda v: v is None)
    missing: Literal["error", "reference"] = Field(
        default="error", description="reference: a missing value is imputed with the reference")
    severity_bands: list[SeverityBand] | None = Field(
        default=None, max_length=MAX_CATEGORIES,
        description="numeric and integer features: published bands, ascending, within bounds")

    @field_serializer("lower", "upper", "model_lower", "model_upper", "reference")
    def _whole_as_int(self, value: float | str | None) -> float | int | str | None:
        """Show 27, not 27.0 (and hash both spellings alike)."""
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value

    @property
    def bounds(self) -> tuple[float, float]:
        """The valid range of the column's numeric values (categorical: its codes)."""
        if self.kind is FeatureKind.BINARY:
            return 0.0, 1.0
        if self.kind is FeatureKind.CATEGORICAL:
            return 0.0, float(len(self.categories or ()) - 1)
        return float(self.lower), float(self.upper)  # type: ignore[arg-type]

    @property
    def model_range(self) -> tuple[float, float]:
        lower, upper = self.bounds
        return (lower if self.model_lower is None else self.model_lower,
                upper if self.model_upper is None else self.model_upper)

    @property
    def reference_value(self) -> float:
        """The reference as the feature matrix holds it (categorical: the category's code)."""
        if self.kind is FeatureKind.CATEGORICAL:
            return float((self.categories or []).index(str(self.reference)))
        return float(self.reference)


class Attribute(RequestModel):
    """A subgroup-only categorical column: validated and stored, never a model feature."""

    name: str
    label: str | None = _free_text()
    categories: list[str]


class OutcomeBands(RequestModel):
    """The model's risk-band policy: the probabilities from which a patient is medium, and high.

    Public clinical policy declared with the outcome (never a statistic of the rows); every model
    trained on the schema starts with a copy, which ``PUT /v1/models/{id}/band-thresholds`` can
    change later. 0 < low_medium < medium_high < 1.
    """

    low_medium: float = Field(gt=0.0, lt=1.0)
    medium_high: float = Field(gt=0.0, lt=1.0)


class Outcome(RequestModel):
    """The binary outcome column (values 0/1) and how every output names and bands it.

    ``positive`` is the value that means the event. ``label`` names the event as a person reads it
    ("Readmission within 90 days"); ``horizon_days`` is the prediction window, when the outcome
    has one (FHIR ``whenPeriod`` is sent only then); ``code`` is its clinical coding (FHIR
    ``RiskAssessment.prediction.outcome`` and ``code``); ``bands`` the risk-band cut-offs.
    An upload must declare ``label`` and ``bands`` (``check_schema(..., upload=True)``).
    """

    name: str
    label: str | None = _free_text()
    positive: Literal[0, 1] = 1
    horizon_days: int | None = Field(default=None, ge=1, le=3660,
                                     description="prediction window in days, when there is one")
    code: Code | None = None
    description: str | None = _free_text(1000)
    bands: OutcomeBands | None = Field(
        default=None, description="risk-band cut-offs; required for uploads"
    )


class DatasetSchema(RequestModel):
    """A dataset's declared columns: model features, outcome, subgroup attributes, id."""

    features: list[FeatureSpec]
    outcome: Outcome
    subgroups: list[str] = Field(default_factory=list)
    attributes: list[Attribute] = Field(default_factory=list)
    id_column: str | None = Field(
        default=None, description="absent: ids are 1-based row numbers (order-dependent)"
    )
    id_kind: Literal["text", "integer"] = Field(default="text", description=(
        "with id_column: text (an id is its text; a Parquet integer, its decimal text) or "
        'integer (whole numbers, one id each: "007", "+7" and a Parquet 7 are all "7")'))
    extra_columns: Literal["refuse", "ignore"] = Field(default="refuse", description=(
        "an uploaded column the schema does not declare: refused (422), or ignored (never "
        "read nor kept; the dataset lists its name)"))

    @property
    def feature_names(self) -> list[str]:
        return [f.name for f in self.features]

    @property
    def columns(self) -> list[str]:
        """Every column an uploaded table must have, exactly (order free)."""
        ids = [] if self.id_column is None else [self.id_column]
        outcome = [self.outcome.name] if self.labelled else []
        return [*ids, *self.feature_names, *(a.name for a in self.attributes), *outcome]

    @property
    def labelled(self) -> bool:
        """Whether the table carries the outcome column (see ``FeaturesOnly``)."""
        return True


class FeaturesOnly(DatasetSchema):
    """The same declaration read as an unlabelled follow-up's table (features only): every
    column but the outcome, which such a table must not carry. Its hash is the declaration's,
    so the follow-up stays of its model's schema; the rows read back with no outcome (NaN)."""

    @property
    def labelled(self) -> bool:
        return False


OUTCOME_ADDITIONS = ("horizon_days", "code", "description", "bands")
DEFAULT_ADDITIONS = {"id_kind": "text"}
"""Fields added after schemas were first hashed, left out of the hash while unset (outcome) or
at their default: every declaration stored before them (datasets, artifacts) keeps its hash.
``extra_columns`` never counts: how a file is read is no part of what a model reads."""


def schema_hash(schema: DatasetSchema) -> str:
    """SHA-256 of the canonical JSON (sorted keys, defaults included, no whitespace): the same
    declaration always hashes the same, whatever key order or defaults it was sent with
    (``OUTCOME_ADDITIONS`` count only when declared, ``DEFAULT_ADDITIONS`` off default)."""
    document = schema.model_dump(mode="json", exclude={"extra_columns"})
    for key, default in DEFAULT_ADDITIONS.items():
        if document.get(key) == default:
            document.pop(key)
    outcome = document["outcome"]
    for key in OUTCOME_ADDITIONS:
        if outcome.get(key) is None:
            outcome.pop(key, None)
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


def outcome_words(schema: DatasetSchema) -> str:
    """How a person reads the model's outcome: its declared label, else its column's name.

    Every text that names what a model predicts (CDS cards, discovery) reads this, so a
    clinic's model of another outcome is never described with the built-in schema's words.
    """
    return schema.outcome.label or schema.outcome.name


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
