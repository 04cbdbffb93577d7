"""A request's ``model`` field: a registered family's name (``training.model`` and each search
candidate's), listed in the OpenAPI enum and refused as a ``Literal`` of the names would be."""

from typing import Any

from pydantic_core import PydanticCustomError

from app.families import family_names


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
