"""A request's ``model`` field: a registered family's name (``training.model`` and each search
candidate's), listed in the OpenAPI enum and refused as a ``Literal`` of the names would be."""

from typing import Any

from pydantic_core import PydanticCustomError

from app.families import create_family, family_names


def family_enum(schema: dict[str, Any]) -> None:
    """The registered families, listed when the schema is generated (as a ``Literal`` would)."""
    schema["enum"] = list(family_names())


def registered_family(value: Any) -> Any:
    """``value`` if it names a registered family; else the error a ``Literal`` of the names
    gives, so a family registered later is accepted without an edit here."""
    names = family_names()
    if value not in names:
        quoted = [repr(name) for name in names]
        expected = " or ".join(filter(None, (", ".join(quoted[:-1]), quoted[-1])))
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": expected})
    return value


def dp_sgd_family_enum(schema: dict[str, Any]) -> None:
    """The registered families trained by DP-SGD (what ``dp_sgd_family`` accepts)."""
    schema["enum"] = [name for name in family_names() if create_family(name).dp_sgd]


def dp_sgd_family(value: Any) -> Any:
    """``value`` if it names a registered family trained by DP-SGD (what federation and the
    accounted search vary and charge by steps); a fitted family is refused by name."""
    value = registered_family(value)
    if not create_family(value).dp_sgd:
        names = ", ".join(repr(n) for n in family_names() if create_family(n).dp_sgd)
        raise PydanticCustomError(
            "dp_sgd_family", "model {model!r} is not trained by DP-SGD, which this needs; "
            "the DP-SGD families are {names}", {"model": value, "names": names})
    return value
