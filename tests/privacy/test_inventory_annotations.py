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
from pydantic import BaseModel, create_model

from app.main import create_app
from app.privacy import inventory
from app.privacy.annotations import Released, annotated_entries
from app.privacy.inventory import Inventory
from app.privacy.releases import Release

BEFORE = json.loads(Path(__file__).with_name("annotated_before.json").read_text())
DOCUMENT = create_app().openapi()
MIGRATED = {"ComparisonOut", "StatisticsReleaseOut", "ReleasePrivacyOut", "AnswerOut",
            "NoiseOut", "CellOut", "SearchOut", "SearchCharge", "SearchCandidateRecord",
            "SearchRecord", "MonitoringRunOut", "FeatureDriftOut", "RunPrivacyOut",
            "PeriodOut", "MonitoringTimeline", "FollowUpOut"}


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


def test_the_moved_schemas_have_no_module_entries() -> None:
    listed = {e.where.split(".")[0] for e in inventory.ENTRIES}
    assert not listed & MIGRATED
    annotated = {e.where.split(".")[0] for e in annotated_entries(DOCUMENT)}
    assert annotated >= MIGRATED


def test_a_field_classified_in_both_places_is_a_duplicate() -> None:
    listed = next(e for e in inventory.ENTRIES if e.where == "JobOut.id")
    job_out = create_model("JobOut", id=(Annotated[int, Released(Release.PUBLIC_INPUT)], ...))
    twice = Inventory(annotated_entries(_document(job_out)))
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
