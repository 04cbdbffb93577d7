"""The release inventory: everything that leaves the trust boundary, and what releases it.

Every field of every response body, every member an error body can add, every response
header that is not standard HTTP, every variable of a report page, every structured log field
and value formatted into a log message, and every Prometheus metric family has an entry naming
the kinds of release it is made of (``app.privacy.releases``), each with its mechanism. A
response schema's field carries its entry where it is declared (``app.privacy.annotations``:
``Annotated[..., Released(...)]``), read back from the OpenAPI document; the rest live in
``inventory_http`` (``app.core``'s shared fields, bodies that are no component, pages, error
members, headers) and ``inventory_outputs`` (page variables, logs, metrics).
``tests/privacy/test_release_inventory.py`` walks the OpenAPI document, the templates, the log
formatter, the logging calls and the metrics registry, ``test_inventory_problems.py`` and
``test_inventory_headers.py`` scan the source for error members and headers, and each fails on
anything without an entry, or an entry for something that no longer exists. ``Inventory``
joins the modules' entries and the annotated fields', and ``GET /v1/privacy/inventory`` serves
its ``document()`` built from the app's own document.
"""

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, Field

from app.privacy.annotations import PUBLIC
from app.privacy.inventory_http import HTTP_ENTRIES
from app.privacy.inventory_outputs import OUTPUT_ENTRIES
from app.privacy.releases import MECHANISMS, Entry, Release

RULE = (
    "Only differentially private releases leave the trust boundary, each named here with its "
    "mechanism: the model and its epsilon, the DP calibration and evaluation (metrics are "
    "post-processing of one noisy histogram), DP statistics. Exact figures only for datasets "
    "marked public (non_private: true says so). No training loss, no data min/max, no single "
    "patient's value; patient features sent for scoring are never logged."
)

ENTRIES: tuple[Entry, ...] = (*HTTP_ENTRIES, *OUTPUT_ENTRIES)
BY_WHERE: dict[str, Entry] = {e.where: e for e in ENTRIES}


class Inventory:
    """The modules' entries and the schemas' own (``app.privacy.annotations``), as one."""

    def __init__(self, annotated: Sequence[Entry] = ()) -> None:
        self.annotated = tuple(annotated)
        self.entries: tuple[Entry, ...] = (*ENTRIES, *self.annotated)
        self.by_where: dict[str, Entry] = {e.where: e for e in self.entries}

    def duplicates(self) -> list[str]:
        """Places classified twice (the later entry would silently win), a field annotated
        on its schema and listed in a module too among them: one home per rule."""
        seen: set[str] = set()
        twice = []
        for e in self.entries:
            if e.where in seen:
                twice.append(e.where)
            seen.add(e.where)
        return twice

    def nearest(self, prefix: str, path: Sequence[str]) -> Entry | None:
        """The entry of ``prefix`` + ``path``, else of its nearest ancestor: a free-form
        object classified as a whole covers its keys, a page variable its attributes."""
        for end in range(len(path), 0, -1):
            found = self.by_where.get(prefix + ".".join(path[:end]))
            if found is not None:
                return found
        return None

    def field_entry(self, schema: str, path: Sequence[str]) -> Entry | None:
        """The entry of a response component's property path, e.g. ``("ModelOut",
        ["metrics"])``."""
        return self.nearest(f"{schema}.", path)

    def template_entry(self, template: str, chain: Sequence[str]) -> Entry | None:
        """The entry of a page variable or attribute chain, e.g. ``("job.html", ["card",
        "use"])``."""
        return self.nearest(f"template:{template}:", chain)

    def metric_entry(self, family: str) -> Entry | None:
        """A metric family's entry; ``name_last`` and other suffixed families belong to
        ``name``."""
        for where, found in self.by_where.items():
            name = where.removeprefix("metric:")
            if where.startswith("metric:") and (family == name or family.startswith(name + "_")):
                return found
        return None

    def places(self, kind: Release) -> int:
        """How many entries name ``kind``."""
        return sum(kind in e.releases for e in self.entries)

    def document(self) -> "ReleaseInventory":
        """The inventory as ``GET /v1/privacy/inventory`` serves it."""
        return ReleaseInventory(
            rule=RULE,
            kinds=[ReleaseKindOut(kind=k, mechanism=MECHANISMS[k], places=self.places(k))
                   for k in Release],
            entries=[InventoryEntryOut(where=e.where, releases=list(e.releases), note=e.note,
                                       see=e.see) for e in self.entries],
        )


class ReleaseKindOut(BaseModel):
    kind: Annotated[Release, PUBLIC]
    mechanism: Annotated[str, PUBLIC] = Field(
        description="what releases values of this kind, in one paragraph")
    places: Annotated[int, PUBLIC] = Field(description="how many inventory entries name this kind")


class InventoryEntryOut(BaseModel):
    where: Annotated[str, PUBLIC] = Field(
        description="Schema.field (OpenAPI component), response:<operationId>, problem:<member> "
        "(an error body's extra member), header:<Name>, template:<file>:<variable>, log:<field>, "
        "log-arg:<expression> or metric:<name>"
    )
    releases: Annotated[list[Release], PUBLIC] = Field(
        description="every kind the value is made of")
    note: Annotated[str, PUBLIC]
    see: Annotated[str, PUBLIC] = Field(
        description="where it is classified instead (a schema or a page)")


class ReleaseInventory(BaseModel):
    """Every place a value leaves the service, and the mechanism that releases it."""

    rule: Annotated[str, PUBLIC]
    kinds: list[ReleaseKindOut]
    entries: list[InventoryEntryOut]
