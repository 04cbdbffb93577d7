"""Base models: requests strict about unknown fields and non-finite numbers; responses read
from ORM rows, with the shared page shape and UTC timestamps."""

import re
from datetime import datetime
from types import NoneType, UnionType
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Strict, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from app.core.time import as_utc
from app.core.validation import MAX_LISTED_ERRORS, unknown_keys_checked

PrivacyNumber = Annotated[float, Strict()]
"""An epsilon, a delta or a noise multiplier: a JSON number (an integer is one), never a
string that reads as one. A privacy parameter sent as ``"1"`` is a client that builds its
request by hand or from the wrong field; it is refused (422 naming the field) rather than
guessed at."""


class RequestModel(BaseModel):
    """Rejects unknown fields and NaN/inf so typos and poisoned values get a clear 422, and
    takes only ``true`` or ``false`` for a boolean (pydantic's lax mode reads "yes", "on", 1).

    An object with more unknown keys than an answer lists is refused without building an
    error per key (``app.core.validation``); other objects pay one ``len`` for the check.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    _accepted_keys: ClassVar[frozenset[str]] = frozenset()
    _most_keys: ClassVar[int] = MAX_LISTED_ERRORS
    _boolean_keys: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        keys = set(cls.model_fields)
        for info in cls.model_fields.values():
            keys |= {a for a in (info.alias, info.validation_alias) if isinstance(a, str)}
        cls._accepted_keys = frozenset(keys)
        cls._most_keys = len(keys) + MAX_LISTED_ERRORS
        cls._boolean_keys = tuple(info.alias or name for name, info in cls.model_fields.items()
                                  if _is_boolean(info.annotation))

    @model_validator(mode="before")
    @classmethod
    def _unknown_keys_within_budget(cls, value: Any) -> Any:
        if isinstance(value, dict) and len(value) > cls._most_keys:
            return unknown_keys_checked(value, cls._accepted_keys, cls.__name__)
        return value

    @model_validator(mode="before")
    @classmethod
    def _strict_booleans(cls, value: Any) -> Any:
        if cls._boolean_keys and isinstance(value, dict):
            refuse_non_booleans(value, cls._boolean_keys, cls.__name__)
        return value


def _is_boolean(annotation: Any) -> bool:
    """``bool`` or ``bool | None``."""
    if annotation is bool:
        return True
    args = set(get_args(annotation))
    return get_origin(annotation) in (Union, UnionType) and args == {bool, NoneType}


def refuse_non_booleans(value: dict[str, Any], keys: tuple[str, ...], title: str) -> None:
    """A ValidationError naming each of ``keys`` whose value is neither a bool nor null."""
    errors = [
        InitErrorDetails(
            type=PydanticCustomError("bool_type", "Input should be true or false",
                                     {"allowed": "true or false"}),
            loc=(key,), input=value[key])
        for key in keys
        if key in value and value[key] is not None and not isinstance(value[key], bool)
    ]
    if errors:
        raise ValidationError.from_exception_data(title, errors)


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


REFUSED_IN_TEXT: tuple[tuple[int, int], ...] = (
    (0x00, 0x1F), (0x7F, 0x9F),  # controls (Cc): C0, DEL, C1
    (0x2028, 0x2029),  # line and paragraph separators (Zl, Zp)
    # Format characters (Cf) as of Unicode 15.1, but for the zero-width non-joiner and joiner
    # (U+200C, U+200D), which Persian, Indic scripts and emoji sequences (a health worker is
    # woman, U+200D, staff of Aesculapius) need.
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200B), (0x200E, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064),
    (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)
"""Code point ranges free text may not hold (inclusive)."""


def _escaped(code: int) -> str:
    # \xHH, \uHHHH and \UHHHHHHHH read the same in Python's re and pydantic's Rust regex.
    return f"\\x{code:02x}" if code < 0x100 else (
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


_REFUSED_CLASS = "".join(
    _escaped(lo) if lo == hi else f"{_escaped(lo)}-{_escaped(hi)}" for lo, hi in REFUSED_IN_TEXT
)
NO_CONTROL_CHARACTERS = f"^[^{_REFUSED_CLASS}]*$"
"""Free text (names, labels, filters): any Unicode but controls, line separators and invisible
format characters. PostgreSQL cannot store or even compare a NUL; a name is one line on pages
and in logs; and a bidirectional override (U+202E), an isolate (U+2066-2069) or a zero-width
space (U+200B) makes a name read differently from what it is (U+202E then "gpj.exe" shows as
"exe.jpg") or two names look the same."""
TEXT_RULE = "text without control characters, line separators or invisible format characters"
_REFUSED_CHARACTER = re.compile(f"[{_REFUSED_CLASS}]")


def refused_character(text: object) -> str:
    """Why ``text`` breaks ``NO_CONTROL_CHARACTERS``: its first refused character, by code."""
    found = _REFUSED_CHARACTER.search(text) if isinstance(text, str) else None
    if found is None:
        return f"must be {TEXT_RULE}"
    return f"the character U+{ord(found.group()):04X} at position {found.start()} is not allowed"

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


def _collect_ranges(model: type[BaseModel], prefix: str, into: dict[str, str]) -> None:
    for name, info in model.model_fields.items():
        path = f"{prefix}{info.alias or name}"
        allowed = _range_of(info)
        if allowed:
            into[path] = allowed
        nested = _nested_model(info.annotation)
        if nested is not None:
            _collect_ranges(nested, f"{path}.", into)


def register_ranges(model: type[BaseModel], prefix: str = "") -> type[BaseModel]:
    """Record the allowed range of every bounded field of ``model`` (recursively), under the
    name a request spells it (its alias: ``schema.outcome.bands.low_medium``)."""
    _collect_ranges(model, prefix, ALLOWED_RANGES)
    return model


_model_ranges: dict[type[BaseModel], dict[str, str]] = {}


def ranges_of(model: type[BaseModel]) -> dict[str, str]:
    """The allowed ranges of ``model``'s own fields: two request models may bound the same path
    differently (a job's and a monitoring run's ``privacy.target_epsilon``), and an error
    quotes the range of the body its route reads."""
    if model not in _model_ranges:
        found: dict[str, str] = {}
        _collect_ranges(model, "", found)
        _model_ranges[model] = found
    return _model_ranges[model]
