"""Response fields classified on their schemas (``app.privacy.annotations``): the served
inventory reads them from the OpenAPI document, a field has one home (its schema or an
``inventory_*`` module, never both), and the fields moved onto their schemas are served
exactly as the modules served them (``annotated_before.json``: the served entries of those
fields, taken from ``GET /v1/privacy/inventory`` before the move)."""

import json
from pathlib import Path
from typing import Annotated

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, create_model

from app.core.schemas import Page
from app.main import create_app
from app.privacy import inventory, inventory_http
from app.privacy.annotations import Released, annotated_entries, class_note
from app.privacy.inventory import Inventory
from app.privacy.releases import Release

BEFORE = json.loads(Path(__file__).with_name("annotated_before.json").read_text())
DOCUMENT = create_app().openapi()
PAGE_FIELDS = set(Page.model_fields) - {"items"}


def _in_app_core(where: str) -> bool:
    """A field of a model ``app.core`` declares: ``app.core`` sits below ``app.privacy``, so
    these cannot carry ``Released`` and stay in ``inventory_http``."""
    component, field = where.split(".", 1)
    return component in {"Problem", "FieldProblem"} or (
        component in inventory_http.PAGES and field in PAGE_FIELDS)


def _document(*models: type[BaseModel]) -> dict[str, object]:
    return {"components": {"schemas": {
        m.__name__: m.model_json_schema(mode="serialization") for m in models}}}


def test_the_moved_fields_are_served_as_before(client: TestClient) -> None:
    response = client.get("/v1/privacy/inventory")
    assert response.status_code == 200, response.text
    served = {e["where"]: e for e in response.json()["entries"]}
    assert {w: served.get(w) for w in BEFORE} == BEFORE
    moved = {e.where for e in annotated_entries(DOCUMENT)}
    assert moved == set(BEFORE), "annotated fields without a pre-move snapshot, or gone"


def test_only_app_core_fields_are_classified_in_modules() -> None:
    listed = {e.where for e in inventory.ENTRIES if ":" not in e.where}
    assert listed and all(_in_app_core(w) for w in listed), sorted(
        w for w in listed if not _in_app_core(w))
    annotated = [e.where for e in annotated_entries(DOCUMENT)]
    assert len(annotated) > len(listed) and not any(_in_app_core(w) for w in annotated)


def test_a_field_classified_in_both_places_is_a_duplicate() -> None:
    listed = next(e for e in inventory.ENTRIES if e.where == "Problem.type")
    problem = create_model("Problem", type=(Annotated[str, Released(Release.PUBLIC_INPUT)], ...))
    twice = Inventory(annotated_entries(_document(problem)))
    assert twice.duplicates() == [listed.where]
    assert not Inventory(annotated_entries(DOCUMENT)).duplicates()


def test_the_document_carries_kinds_and_note_through_nullable_and_nested_shapes() -> None:
    class Inner(BaseModel):
        count: Annotated[int, Released(Release.PUBLIC_BY_CONVENTION)]

    class Outer(BaseModel):
        value: Annotated[float, Released(Release.DP_STATISTICS, note="noisy")] | None
        pair: Annotated[float | None, Released(Release.LEDGER, Release.PUBLIC_INPUT)]
        inner: Inner
        plain: int

    found = {e.where: (e.releases, e.note) for e in annotated_entries(_document(Outer, Inner))}
    assert found == {
        "Outer.value": ((Release.DP_STATISTICS,), "noisy"),
        "Outer.pair": ((Release.LEDGER, Release.PUBLIC_INPUT), ""),
        "Inner.count": ((Release.PUBLIC_BY_CONVENTION,), ""),
    }


def test_a_release_names_at_least_one_kind() -> None:
    with pytest.raises(ValueError, match="at least one kind"):
        Released()
    with pytest.raises(ValueError):
        Released("not-a-kind")  # type: ignore[arg-type]


def test_a_class_note_reaches_inherited_fields_without_their_own() -> None:
    class Base(BaseModel):
        shared: Annotated[int, Released(Release.DP_EVALUATION)]
        own: Annotated[int, Released(Release.LEDGER, note="its own")]

    class Child(Base):
        model_config = ConfigDict(json_schema_extra=class_note("the child's"))

    found = {e.where: e.note for e in annotated_entries(_document(Child, Base))}
    assert found == {"Child.shared": "the child's", "Child.own": "its own",
                     "Base.shared": "", "Base.own": "its own"}


def test_a_request_only_copy_of_a_component_releases_nothing() -> None:
    document = _document(create_model(
        "Spec", value=(Annotated[int, Released(Release.PUBLIC_INPUT)], ...)))
    document["components"]["schemas"]["Spec-Input"] = document[  # type: ignore[index]
        "components"]["schemas"]["Spec"]  # type: ignore[index]
    assert [e.where for e in annotated_entries(document)] == ["Spec.value"]
