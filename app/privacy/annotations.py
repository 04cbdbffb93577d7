"""Release classifications carried by the response schemas' own fields.

A response field states what releases it where it is declared: ``Annotated[float,
Released(DP_EVALUATION, note="...")]`` writes ``x-release`` (the kinds) and ``x-release-note``
into the field's schema in the OpenAPI document. ``annotated_entries`` reads them back from a
document, so the inventory (``app.privacy.inventory``) and its test walk the document the
service serves and need not import the domains that declare the schemas (they sit above this
package). A field is classified either here or in an ``inventory_*`` module, never both.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from app.privacy.releases import Entry, Release

KINDS_KEY = "x-release"
NOTE_KEY = "x-release-note"


@dataclass(frozen=True, init=False)
class Released:
    """``Annotated`` metadata naming every kind of release a response field is made of."""

    kinds: tuple[Release, ...]
    note: str

    def __init__(self, *kinds: Release, note: str = "") -> None:
        if not kinds:
            raise ValueError("a released field names at least one kind of release")
        object.__setattr__(self, "kinds", tuple(Release(k) for k in kinds))
        object.__setattr__(self, "note", note)

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema,
                                     handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema[KINDS_KEY] = [k.value for k in self.kinds]
        if self.note:
            schema[NOTE_KEY] = self.note
        return schema


# The plain markers the schema modules share (a note makes a field's own marker).
PUBLIC = Released(Release.PUBLIC_INPUT)
LEDGER = Released(Release.LEDGER)
OPERATIONAL = Released(Release.OPERATIONAL)


def class_note(note: str) -> Callable[[dict[str, Any], type], None]:
    """A model's ``json_schema_extra`` giving ``note`` to each of its classified fields that
    has none of its own: for fields a base class shares between components whose notes differ
    (each subclass names its own), the base declaring only their kinds."""

    def give(schema: dict[str, Any], model: type) -> None:
        for prop in schema.get("properties", {}).values():
            for branch in [prop, *prop.get("anyOf", [])]:
                if KINDS_KEY in branch:
                    branch.setdefault(NOTE_KEY, note)
                    break

    return give


def _alternatives(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield schema
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(key, []):
            yield from _alternatives(branch)


def _properties(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {name: prop for branch in _alternatives(schema)
            for name, prop in branch.get("properties", {}).items()}


def _classification(schema: Mapping[str, Any]) -> tuple[tuple[Release, ...], str] | None:
    """The kinds and note on the property itself or on one of its branches (``X | None``)."""
    for branch in _alternatives(schema):
        if KINDS_KEY in branch:
            kinds = tuple(Release(k) for k in branch[KINDS_KEY])
            return kinds, str(branch.get(NOTE_KEY, ""))
    return None


def _walk(component: str, path: tuple[str, ...], schema: Mapping[str, Any]) -> Iterator[Entry]:
    for name, prop in sorted(_properties(schema).items()):
        where = (*path, name)
        found = _classification(prop)
        if found is not None:
            yield Entry(f"{component}.{'.'.join(where)}", found[0], found[1])
        yield from _walk(component, where, prop)


def annotated_entries(document: Mapping[str, Any]) -> list[Entry]:
    """Every classified property of the document's components, as inventory entries.

    A model that is both a request and a response body, with shapes that differ between the
    two, has two components (``DatasetSchema-Input``, ``DatasetSchema-Output``): the request's
    copy carries the same annotations, but nothing is released through it.
    """
    components: Mapping[str, Any] = document.get("components", {}).get("schemas", {})
    return [e for name, schema in sorted(components.items()) if not name.endswith("-Input")
            for e in _walk(name, (), schema)]
