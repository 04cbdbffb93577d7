"""The declared schema of a dataset: the one source of truth for its columns.

Ingestion validates uploaded rows against it; scaling, explanations, FHIR, CDS Hooks and the
dashboard form read it. Bounds, model ranges and reference values are *public* (instrument
ranges, declared caps, a clinically ordinary patient), never statistics of the private data.

Pydantic parses the shape (types, unknown fields, free-text lengths);
``app.datasets.schema.checks.check_schema`` applies the rules that relate fields to each other.

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
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_serializer

from app.core.schemas import NO_CONTROL_CHARACTERS, RequestModel
from app.datasets.schema.feature_prefetch import FeaturePrefetch
from app.privacy.annotations import PUBLIC, Released
from app.privacy.releases import Release

NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
MAX_FEATURES, MAX_CATEGORIES, MAX_CATEGORY_CHARS, MAX_ATTRIBUTES = 200, 50, 64, 20
RESERVED_NAMES = frozenset(
    {"id", "part", "probability", "log_odds", "band", "contributions", "intercept", "model_id"}
)
"""Keys the service itself writes next to feature values (scoring results, exports, model
artifacts); a column of that name would be ambiguous there. Names starting with ``_`` are
excluded by the pattern and left to the service (the stored table's ``_id``)."""

def _free_text(max_length: int = 200) -> Any:
    """An optional one-line text (label, unit, display)."""
    return Field(default=None, max_length=max_length, pattern=NO_CONTROL_CHARACTERS)


DECLARED = Released(Release.PUBLIC_INPUT, note="the data steward's declaration (public bounds, "
                    "categories, references, codes), never a statistic of the rows")
BAND_POLICY = Released(Release.PUBLIC_INPUT, note="the declared risk-band policy, never a "
                       "statistic of the rows")


class FeatureKind(StrEnum):
    NUMERIC = "numeric"
    INTEGER = "integer"
    BINARY = "binary"
    CATEGORICAL = "categorical"


class Code(RequestModel):
    """A clinical code for the column (e.g. LOINC), shown in FHIR resources."""

    system: Annotated[str, PUBLIC] = Field(
        min_length=1, max_length=200, pattern=NO_CONTROL_CHARACTERS)
    code: Annotated[str, PUBLIC] = Field(min_length=1, max_length=64, pattern=NO_CONTROL_CHARACTERS)
    display: Annotated[str | None, PUBLIC] = _free_text()


class SeverityBand(RequestModel):
    """A published band of an instrument (e.g. PHQ-9 20-27 "severe"), inclusive on both ends;
    scoring names it next to a value in its reasons."""

    model_config = ConfigDict(serialize_by_alias=True)

    from_: Annotated[float, PUBLIC] = Field(alias="from")
    to: Annotated[float, PUBLIC]
    label: Annotated[str, PUBLIC] = Field(
        min_length=1, max_length=120, pattern=NO_CONTROL_CHARACTERS)

    @field_serializer("from_", "to")
    def _whole(self, value: float) -> float | int:
        return int(value) if float(value).is_integer() else value


class FeatureSpec(RequestModel):
    """One model feature: its kind, public bounds and the public reference patient's value."""

    name: Annotated[str, PUBLIC]
    kind: Annotated[FeatureKind, PUBLIC]
    label: Annotated[str | None, PUBLIC] = _free_text()
    unit: Annotated[str | None, PUBLIC] = _free_text(64)
    lower: Annotated[float | None, PUBLIC] = None
    upper: Annotated[float | None, PUBLIC] = None
    model_lower: Annotated[float | None, PUBLIC] = Field(
        default=None, description="scaling range, within bounds")
    model_upper: Annotated[float | None, PUBLIC] = Field(
        default=None, description="values above count as this")
    categories: Annotated[list[str] | None, PUBLIC] = None
    reference: Annotated[float | str, PUBLIC]
    code: Code | None = None
    prefetch: FeaturePrefetch | None = Field(default=None, exclude_if=lambda v: v is None)
    missing: Annotated[Literal["error", "reference"], PUBLIC] = Field(
        default="error", description="reference: a missing value is imputed with the reference")
    severity_bands: list[SeverityBand] | None = Field(
        default=None, max_length=MAX_CATEGORIES,
        description="numeric and integer features: published bands, ascending, within bounds")

    @field_serializer("lower", "upper", "model_lower", "model_upper", "reference")
    def _whole_as_int(self, value: float | str | None) -> Annotated[float | int | str | None,
                                                                   PUBLIC]:
        """Show 27, not 27.0 (and hash both spellings alike). The return type is the fields'
        serialized schema, and a field with a default loses its own ``Released`` to it."""
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

    name: Annotated[str, PUBLIC]
    label: Annotated[str | None, PUBLIC] = _free_text()
    categories: Annotated[list[str], PUBLIC]


class OutcomeBands(RequestModel):
    """The model's risk-band policy: the probabilities from which a patient is medium, and high.

    Public clinical policy declared with the outcome (never a statistic of the rows); every model
    trained on the schema starts with a copy, which ``PUT /v1/models/{id}/band-thresholds`` can
    change later. 0 < low_medium < medium_high < 1.
    """

    low_medium: Annotated[float, BAND_POLICY] = Field(gt=0.0, lt=1.0)
    medium_high: Annotated[float, BAND_POLICY] = Field(gt=0.0, lt=1.0)


class Outcome(RequestModel):
    """The binary outcome column (values 0/1) and how every output names and bands it.

    ``positive`` is the value that means the event. ``label`` names the event as a person reads it
    ("Readmission within 90 days"); ``horizon_days`` is the prediction window, when the outcome
    has one (FHIR ``whenPeriod`` is sent only then); ``code`` is its clinical coding (FHIR
    ``RiskAssessment.prediction.outcome`` and ``code``); ``bands`` the risk-band cut-offs.
    An upload must declare ``label`` and ``bands`` (``check_schema(..., upload=True)``).
    """

    name: Annotated[str, PUBLIC]
    label: Annotated[str | None, PUBLIC] = _free_text()
    positive: Annotated[Literal[0, 1], PUBLIC] = 1
    horizon_days: Annotated[int | None, PUBLIC] = Field(
        default=None, ge=1, le=3660,
        description="prediction window in days, when there is one")
    code: Code | None = None
    description: Annotated[str | None, PUBLIC] = _free_text(1000)
    bands: OutcomeBands | None = Field(
        default=None, description="risk-band cut-offs; required for uploads"
    )


class DatasetSchema(RequestModel):
    """A dataset's declared columns: model features, outcome, subgroup attributes, id."""

    features: list[FeatureSpec]
    outcome: Outcome
    subgroups: Annotated[list[str], DECLARED] = Field(default_factory=list)
    attributes: list[Attribute] = Field(default_factory=list)
    id_column: Annotated[str | None, DECLARED] = Field(
        default=None, description="absent: ids are 1-based row numbers (order-dependent)"
    )
    id_kind: Annotated[Literal["text", "integer"], DECLARED] = Field(
        default="text", description=(
        "with id_column: text (an id is its text; a Parquet integer, its decimal text) or integer "
        '(whole numbers, one id each: "007", "+7" and a Parquet 7 are all "7")'))
    extra_columns: Annotated[Literal["refuse", "ignore"], DECLARED] = Field(
        default="refuse", description=(
        "an uploaded column the schema does not declare: refused (422), or ignored (never read nor "
        "kept; the dataset lists its name)"))

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


def outcome_words(schema: DatasetSchema) -> str:
    """How a person reads the model's outcome: its declared label, else its column's name.

    Every text that names what a model predicts (CDS cards, discovery) reads this, so a
    clinic's model of another outcome is never described with the built-in schema's words.
    """
    return schema.outcome.label or schema.outcome.name
