"""Patient features checked against the *scoring model's* declared schema.

Which schema applies is known only once the model is resolved (the active one, or the one
named), so the request bodies carry the features as a JSON object and this module validates
them: one pydantic model per schema (built once per schema hash), every error naming the field
at its full path (``features.phq9``, ``patients.3.features.sex``) with the allowed range or
categories. The valid rows come back as raw numbers in the schema's order (a categorical
feature as its category's index), ready for ``Encoder.encode``.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
from fastapi.exceptions import RequestValidationError
from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    create_model,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.core.schemas import RequestModel
from app.core.validation import MAX_LISTED_ERRORS, MORE_ERRORS, count_errors
from app.datasets.schema.dataset_schema import FeatureKind, FeatureSpec
from app.datasets.schema.encoding import Encoder

PathOf = Callable[[int], tuple[Any, ...]]
"""Patient k -> the path of its features in the request body."""
NOT_GIVEN = math.nan
"""An imputable feature left out, in a raw row until ``impute`` fills it (validation refuses
NaN as a value, so it can mean nothing else)."""


def whole_number(value: Any) -> Any:
    """Accept 22 or 22.0; reject 22.5, strings and booleans as the wrong type."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("must be a finite number")
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


def real_number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    return value


def allowed_of(feature: FeatureSpec) -> str:
    """A feature's allowed values as error bodies show them: ``[0, 27]`` (a binary feature:
    ``[0, 1]``, whole numbers), ``one of ['female', 'male']``."""
    if feature.kind is FeatureKind.CATEGORICAL:
        return f"one of {feature.categories}"
    lower, upper = feature.bounds
    return f"[{lower:g}, {upper:g}]"


def rule_of(feature: FeatureSpec) -> str:
    """What a valid value is, in a clinician's words: "a whole number from 0 to 27 points"."""
    if feature.kind is FeatureKind.BINARY:
        return "0 (no) or 1 (yes)"
    if feature.kind is FeatureKind.CATEGORICAL:
        return "one of: " + ", ".join(feature.categories or ())
    lower, upper = feature.bounds
    number = "a whole number" if feature.kind is FeatureKind.INTEGER else "a number"
    return f"{number} from {lower:g} to {upper:g} {feature.unit or ''}".strip()


def imputable(feature: FeatureSpec) -> bool:
    """Whether a patient may leave the feature out: its schema declares a missing value
    imputed with the reference, at training and so at scoring."""
    return feature.missing == "reference"


def said_of(feature: FeatureSpec, error_type: str) -> str:
    label = feature.label or feature.name
    if error_type == "missing":
        return f"{label} is required: {rule_of(feature)}"
    if imputable(feature):
        return f"{label} must be {rule_of(feature)}, or left out (null)"
    return f"{label} must be {rule_of(feature)}"


def _field(feature: FeatureSpec) -> tuple[Any, Any]:
    """(type, default) of the feature's field: required, or None when it may be left out."""
    description = " ".join(x for x in (feature.label, feature.unit and f"({feature.unit})") if x)
    if feature.kind is FeatureKind.CATEGORICAL:
        kind: Any = Annotated[Literal[tuple(feature.categories or ())],
                              Field(description=description or None)]
    else:
        lower, upper = feature.bounds
        number, check = (float, real_number) if feature.kind is FeatureKind.NUMERIC else (
            int, whole_number)
        kind = Annotated[number, Field(ge=lower, le=upper, description=description or None),
                         BeforeValidator(check)]
    return (kind | None, None) if imputable(feature) else (kind, ...)


class _FeaturesBase(RequestModel):
    """Every error carries the feature's allowed values (or the feature names) in its context,
    and an error about a feature's value says so in words ("PHQ-9 must be a whole number from
    0 to 27 points"), not in pydantic's ("Input should be less than or equal to 27")."""

    allowed: ClassVar[dict[str, str]] = {}
    features: ClassVar[dict[str, FeatureSpec]] = {}
    imputes: ClassVar[bool] = False  # some feature may be left out (``imputable``)

    @model_validator(mode="wrap")
    @classmethod
    def _name_allowed(cls, value: Any, handler: ModelWrapValidatorHandler[BaseModel]) -> Any:
        try:
            return handler(value)
        except ValidationError as exc:
            names = ", ".join(cls.allowed)
            errors = []
            for e in exc.errors():
                loc = tuple(e["loc"])
                name = str(loc[0]) if loc else ""
                ctx = {k: v for k, v in (e.get("ctx") or {}).items() if k != "error"}
                ctx["allowed"] = cls.allowed.get(name, f"features: {names}")
                template = e["msg"]
                if name in cls.features and e["type"] != "extra_forbidden":
                    ctx["said"], template = said_of(cls.features[name], e["type"]), "{said}"
                errors.append(InitErrorDetails(
                    type=PydanticCustomError(e["type"], template, ctx), loc=loc,
                    input=e["input"]))
            raise ValidationError.from_exception_data(exc.title, errors) from None


_models: dict[str, type[_FeaturesBase]] = {}


def features_model(encoder: Encoder) -> type[_FeaturesBase]:
    """The request model of one schema's features (unknown keys refused), built once."""
    model = _models.get(encoder.hash)
    if model is None:
        fields: dict[str, Any] = {f.name: _field(f) for f in encoder.schema.features}
        model = create_model(
            f"Features_{encoder.hash[:12]}", __base__=_FeaturesBase, **fields)
        model.allowed = {f.name: allowed_of(f) for f in encoder.schema.features}
        model.features = {f.name: f for f in encoder.schema.features}
        model.imputes = any(imputable(f) for f in encoder.schema.features)
        _models[encoder.hash] = model
    return model


def _errors(exc: ValidationError, at: tuple[Any, ...]) -> list[dict[str, Any]]:
    """The errors at their full path in the request body (the input is not echoed)."""
    return [{"type": e["type"], "loc": ("body", *at, *e["loc"]), "msg": e["msg"],
             "input": None, "ctx": e.get("ctx") or {}} for e in exc.errors()]


def _row(encoder: Encoder, valid: BaseModel) -> list[float]:
    row = []
    for feature in encoder.schema.features:
        value = getattr(valid, feature.name)
        if feature.kind is FeatureKind.CATEGORICAL:
            value = (feature.categories or []).index(value)
        row.append(float(value))
    return row


def _row_with_gaps(encoder: Encoder, valid: BaseModel) -> list[float]:
    """``_row`` for a schema with imputable features: NaN where one was not given."""
    row = []
    for feature in encoder.schema.features:
        value = getattr(valid, feature.name)
        if value is None:
            row.append(NOT_GIVEN)
            continue
        if feature.kind is FeatureKind.CATEGORICAL:
            value = (feature.categories or []).index(value)
        row.append(float(value))
    return row


def check(encoder: Encoder, patients: Sequence[Any], at: PathOf
          ) -> tuple[list[list[float]], list[dict[str, Any]]]:
    """(raw rows of the valid patients, errors of the others); checking stops once a full
    answer's worth of errors is found (``MAX_LISTED_ERRORS``)."""
    model = features_model(encoder)
    row_of = _row_with_gaps if model.imputes else _row
    rows: list[list[float]] = []
    errors: list[dict[str, Any]] = []
    found = 0
    for k, features in enumerate(patients):
        try:
            valid = model.model_validate(features)
        except ValidationError as exc:
            raised = _errors(exc, at(k))
            errors.extend(raised)
            found += count_errors(raised)[0]
            unchecked = len(patients) - k - 1
            if found >= MAX_LISTED_ERRORS and unchecked > 0:
                errors.append({"type": MORE_ERRORS, "loc": ("body",), "input": None,
                               "msg": f"validation stopped after {found} errors; the last "
                                      f"{unchecked} patients were not checked",
                               "ctx": {"omitted": 0, "complete": False}})
                break
            continue
        rows.append(row_of(encoder, valid))
    return rows, errors


def raw_rows(encoder: Encoder, patients: Sequence[Mapping[str, Any]], at: PathOf) -> np.ndarray:
    """Validate each patient's features; the raw rows (n, features) in the schema's order,
    NaN where an imputable feature was not given (``impute`` fills it).

    Args:
        at: the path of patient k's features in the request body, for error locations.

    Raises:
        RequestValidationError: every error, each with its path and allowed values (422).
    """
    rows, errors = check(encoder, patients, at)
    if errors:
        raise RequestValidationError(errors)
    return np.array(rows, dtype=np.float64).reshape(len(rows), encoder.n_players)


Imputed = dict[int, tuple[int, ...]]
"""Patient k -> the indices of its features scored at their reference value because they were
not given, in the schema's order; patients who gave every feature are not listed."""


def impute(encoder: Encoder, raw: np.ndarray) -> tuple[np.ndarray, Imputed]:
    """``raw`` with every feature not given (NaN) at its reference value, as ingestion imputes
    a declared ``"missing": "reference"`` column, and which were filled per patient."""
    columns = [j for j, f in enumerate(encoder.schema.features) if imputable(f)]
    if not columns or not np.isnan(raw[:, columns]).any():
        return raw, {}
    gaps = np.isnan(raw)
    filled = np.where(gaps, encoder.reference_raw, raw)
    imputed: dict[int, list[int]] = {}
    for k, j in zip(*(a.tolist() for a in np.nonzero(gaps)), strict=True):
        imputed.setdefault(k, []).append(j)
    return filled, {k: tuple(js) for k, js in imputed.items()}
