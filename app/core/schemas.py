"""Base request/response models: strict about unknown fields and non-finite numbers."""

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo


class RequestModel(BaseModel):
    """Rejects unknown fields and NaN/inf so typos and poisoned values get a clear 422."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ResponseModel(BaseModel):
    model_config = ConfigDict(from_attributes=True)


NO_CONTROL_CHARACTERS = r"^[^\x00-\x1f\x7f]*$"
"""Free text (names, filters): any Unicode but C0 controls and DEL. PostgreSQL cannot store or
even compare a NUL, and a name is one line on pages and in logs."""

ALLOWED_RANGES: dict[str, str] = {}
"""Field path (e.g. ``privacy.target_epsilon``) -> its full allowed range, for error bodies."""


def _range_of(info: FieldInfo) -> str | None:
    lower = upper = None
    left, right = "(", ")"
    for meta in info.metadata:
        for attr, side in (("ge", "["), ("gt", "(")):
            if getattr(meta, attr, None) is not None:
                lower, left = getattr(meta, attr), side
        for attr, side in (("le", "]"), ("lt", ")")):
            if getattr(meta, attr, None) is not None:
                upper, right = getattr(meta, attr), side
    if lower is None and upper is None:
        return None
    lo = "-inf" if lower is None else _number(lower)
    hi = "inf" if upper is None else _number(upper)
    return f"{left if lower is not None else '('}{lo}, {hi}{right if upper is not None else ')'}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def register_param_range(name: str, info: FieldInfo) -> FieldInfo:
    """Record a query/path parameter's allowed range (``Query(...)`` is a FieldInfo too)."""
    allowed = _range_of(info)
    if allowed:
        ALLOWED_RANGES[name] = allowed
    return info


def register_ranges(model: type[BaseModel], prefix: str = "") -> type[BaseModel]:
    """Record the allowed range of every bounded field of ``model`` (recursively)."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        allowed = _range_of(info)
        if allowed:
            ALLOWED_RANGES[path] = allowed
        nested = _nested_model(info.annotation)
        if nested is not None:
            register_ranges(nested, f"{path}.")
    return model
