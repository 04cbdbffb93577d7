"""Reading a prefetch against a declared (non-crisis) schema, without a model: which features
come from where, and how each kind of value is read."""

from datetime import date
from typing import Any

import pytest

from app.cdshooks.prefetch import features_from_prefetch, sources_of
from app.core.errors import InvalidRequest
from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schema.encoding import BUILT_IN_ENCODER, encoder_for
from app.fhir.codes import FEATURE_SYSTEM, LOINC
from tests.cdshooks.test_cds_hooks import bundle, observation
from tests.fhir.clinic_model import CLINIC, SLEEP_CODE, schema

TODAY = date(2026, 6, 1)
PATIENT_ID = "pat-42"


def sources(*, sleep_coded: bool) -> Any:
    return sources_of(encoder_for(DatasetSchema.model_validate(schema(sleep_coded=sleep_coded))))


def read(data: dict[str, Any], *, sleep_coded: bool = True) -> Any:
    return features_from_prefetch(data, sources=sources(sleep_coded=sleep_coded),
                                  patient_id=PATIENT_ID, today=TODAY)


def living(**value: Any) -> dict[str, Any]:
    return {"living": bundle(observation("liv-1", CLINIC, "living-situation", "2026-05-01",
                                         **value))}


def test_where_each_feature_comes_from() -> None:
    uncoded = sources(sleep_coded=False)
    assert uncoded.age is not None and uncoded.age.name == "age"
    assert [c.feature.name for c in uncoded.observed] == ["age", "phq9", "living",
                                                          "prior_crisis"]
    assert [f.name for f in uncoded.unavailable] == ["sleep_hours"]
    assert [f.name for f in sources(sleep_coded=True).unavailable] == []
    # The crisis schema's uncoded features keep their published local codes.
    crisis = sources_of(BUILT_IN_ENCODER)
    assert crisis.unavailable == ()
    assert {c.feature.name: c.system for c in crisis.observed}["gaf"] == FEATURE_SYSTEM


@pytest.mark.parametrize(("value", "category"), [
    ({"valueCodeableConcept": {"coding": [{"system": CLINIC, "code": "alone"}]}}, "alone"),
    ({"valueCodeableConcept": {"text": "Supported housing"}}, "supported housing"),
    ({"valueCodeableConcept": {"coding": [{"code": "x"}], "text": "family"}}, "family"),
    ({"valueString": " FAMILY "}, "family"),
])
def test_a_category_from_a_concept_or_a_string(value: dict[str, Any], category: str) -> None:
    got = read(living(**value))
    assert got.values["living"] == category
    assert got.references["living"] == "Observation/liv-1"


@pytest.mark.parametrize("value", [
    {"valueCodeableConcept": {"text": "homeless"}},
    {"valueString": "2"},
    {"valueInteger": 0},  # never a category's index
    {"valueQuantity": "not an object"},
])
def test_a_value_that_is_no_category_is_refused(value: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest) as refused:
        read(living(**value))
    assert refused.value.field == "prefetch.living"
    assert refused.value.extra["allowed"] == "one of ['alone', 'family', 'supported housing']"


def test_numbers_yes_no_and_birth_date() -> None:
    data = {
        "patient": {"resourceType": "Patient", "id": PATIENT_ID, "birthDate": "1970-07-01"},
        "phq9": observation("p-1", LOINC, "44261-6", "2026-05-01", valueInteger=19),
        "sleep": bundle(observation("s-1", SLEEP_CODE["system"], SLEEP_CODE["code"],
                                    "2026-05-01", valueQuantity={"value": 4.5, "unit": "h"})),
        "prior": bundle(observation("c-1", CLINIC, "prior-crisis", "2026-05-01",
                                    valueCodeableConcept={"text": "Yes"})),
        **living(valueString="alone"),
    }
    got = read(data)
    assert got.values == {"age": 55.0, "phq9": 19.0, "sleep_hours": 4.5, "prior_crisis": 1.0,
                          "living": "alone"}
    assert got.missing == ()
    data.pop("phq9")
    data["patient"] = None  # sent, no data: missing; left out: absent
    assert [f.name for f in read(data).missing] == ["age"]
    assert [f.name for f in read(data).absent] == ["phq9"]
    # Garbage where objects belong is ignored or refused, not a crash.
    with pytest.raises(InvalidRequest):
        read({"phq9": observation("p-2", LOINC, "44261-6", "2026-05-02", valueQuantity=7)})
    assert read({"x": {"resourceType": "Bundle", "entry": "nope"},
                 "y": {"resourceType": "Observation", "code": "44261-6", "subject": 3}}
                ).values == {}
