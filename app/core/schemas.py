"""Base models: requests strict about unknown fields and non-finite numbers; responses read
from ORM rows, with the shared page shape and UTC timestamps."""

from datetime import datetime
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator
from pydantic.fields import FieldInfo

from app.core.time import as_utc
from app.core.validation import MAX_LISTED_ERRORS, unknown_keys_checked


class RequestModel(BaseModel):
    """Rejects unknown fields and NaN/inf so typos and poisoned values get a clear 422.

    An object with more unknown keys than an answer lists is refused without building an
    error per key (``app.core.validation``); other objects pay one ``len`` for the check.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _accepted_keys: ClassVar[frozenset[str]] = frozenset()
    _most_keys: ClassVar[int] = MAX_LISTED_ERRORS

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        keys = set(cls.model_fields)
        for info in cls.model_fields.values():
            keys |= {a for a in (info.alias, info.validation_alias) if isinstance(a, str)}
        cls._accepted_keys = frozenset(keys)
        cls._most_keys = len(keys) + MAX_LISTED_ERRORS

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_within_budget(cls, value: Any) -> Any:
        if isinstance(value, dict) and len(value) > cls._most_keys:
            return unknown_keys_checked(value, cls._accepted_keys, cls.__name__)
        return value


class ResponseModel(BaseModel):
    """A response body read from an ORM row: ``Model.model_validate(row)`` takes each field
    from the row's attribute of that name (or of its ``validation_alias``)."""

    model_config = ConfigDict(from_attributes=True)

    @classmethod
    def from_row(cls, row: object, **derived: Any) -> Self:
        """Validate from ``row``'s attributes, but for the fields given in ``derived``: values
        that are not attributes of the row (a nested view, a flag, a link).

        A nested model may be given the row itself: it reads its own fields from it.
        """
        return cls.model_validate(_RowWith(row, derived))


class _RowWith:
    """``row``'s attributes, with some replaced or added (what ``from_row`` validates)."""

    __slots__ = ("_derived", "_row")

    def __init__(self, row: object, derived: dict[str, Any]) -> None:
        self._row, self._derived = row, derived

    def __getattr__(self, name: str) -> Any:
        if name in self._derived:
            return self._derived[name]
        return getattr(self._row, name)


ItemT = TypeVar("ItemT")


class Page(ResponseModel, Generic[ItemT]):
    """One page of a list, newest or lowest id first as each list says."""

    items: list[ItemT]
    total: int
    limit: int
    offset: int


UtcDatetime = Annotated[datetime, AfterValidator(as_utc)]
"""A timestamp as the API shows it: UTC, with its offset (SQLite hands them back naive)."""


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
