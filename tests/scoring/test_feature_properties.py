"""Hypothesis: feature validation accepts exactly the public ranges, and rejects the rest well.

The crisis schema's features model (``app.scoring.patients``) is what a model trained on the
generator validates against.

Any whole number inside a feature's public bounds is scored; anything else (out of range,
fractional, NaN, infinite, overflowing, a string, a boolean, null, a list, an object) is a 422
whose error names the feature and its allowed range, never a 500. Checked on the request schema
(many examples, fast) and through the API against a trained model (fewer examples).
"""

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.datasets.schema.encoding import BUILT_IN_ENCODER
from app.features import FEATURES
from app.scoring.patients import allowed_of, features_model
from tests.api.seeded_app import seeded_client
from tests.conftest import PATIENT, _sqlite_database

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

NAMES = [f.name for f in FEATURES]
CRISIS_FEATURES = features_model(BUILT_IN_ENCODER)


def allowed_range(name: str) -> str:
    return allowed_of(next(f for f in BUILT_IN_ENCODER.schema.features if f.name == name))
API = settings(max_examples=60, deadline=None, derandomize=True, database=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])
SCHEMA = settings(max_examples=300, deadline=None, derandomize=True, database=None)


def in_range(name: str) -> st.SearchStrategy[Any]:
    """Whole numbers in the bounds, as JSON ints or as whole floats (22 or 22.0)."""
    f = next(f for f in FEATURES if f.name == name)
    whole = st.integers(int(f.lower), int(f.upper))
    return st.one_of(whole, whole.map(float))


patients = st.fixed_dictionaries({name: in_range(name) for name in NAMES})


def out_of_range(name: str) -> st.SearchStrategy[Any]:
    f = next(f for f in FEATURES if f.name == name)
    lo, hi = int(f.lower), int(f.upper)
    return st.one_of(
        st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
        st.integers(min_value=2**63 - 2, max_value=2**200),  # past any database integer
        st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: not lo <= v <= hi),
        st.floats(lo, hi).filter(lambda v: not v.is_integer()),  # in range but fractional
    )


wrong_types = st.one_of(
    st.text(max_size=10), st.booleans(), st.none(),
    st.lists(st.integers(0, 5), max_size=3), st.dictionaries(st.text(max_size=3), st.integers()),
)
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]


def _errors_for(exc: ValidationError, name: str) -> list[dict[str, Any]]:
    return [e for e in exc.errors() if e["loc"][-1] == name]


# --------------------------------------------------------------------------- schema level


@SCHEMA
@given(features=patients)
def test_schema_accepts_every_whole_number_in_range(features: dict[str, Any]) -> None:
    parsed = CRISIS_FEATURES.model_validate(features).model_dump()
    assert parsed == {k: int(v) for k, v in features.items()}
    assert all(type(v) is int for v in parsed.values())


@SCHEMA
@given(data=st.data(), name=st.sampled_from(NAMES))
def test_schema_rejects_out_of_range_with_the_range(data: st.DataObject, name: str) -> None:
    value = data.draw(st.one_of(out_of_range(name), wrong_types))
    with pytest.raises(ValidationError) as caught:
        CRISIS_FEATURES.model_validate({**PATIENT, name: value})
    errors = _errors_for(caught.value, name)
    assert errors, caught.value.errors()
    assert all(e["ctx"]["allowed"] == allowed_range(name) for e in errors), errors


@SCHEMA
@given(name=st.sampled_from(NAMES), value=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_schema_rejects_non_finite(name: str, value: float) -> None:
    with pytest.raises(ValidationError) as caught:
        CRISIS_FEATURES.model_validate({**PATIENT, name: value})
    assert _errors_for(caught.value, name), caught.value.errors()


# --------------------------------------------------------------------------- through the API


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root: Path = tmp_path_factory.mktemp("features")
    yield from seeded_client(_sqlite_database(root), root)


def _assert_names_feature(response: Any, field: str, name: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    named = [e for e in response.json()["errors"] if e["field"] == field]
    assert named, response.json()
    assert all(e.get("allowed") == allowed_range(name) for e in named), named


@API
@given(features=patients)
def test_api_scores_every_in_range_patient(scorer: TestClient, features: dict[str, Any]) -> None:
    response = scorer.post("/v1/risk", json={"features": features})
    assert response.status_code == 200, response.text
    body = response.json()
    assert 0.0 <= body["probability"] <= 1.0
    assert body["band"] in ("low", "medium", "high")
    total = body["reference"]["log_odds"] + sum(c["contribution"] for c in body["contributions"])
    assert total == pytest.approx(body["log_odds"], abs=1e-9)


@API
@given(data=st.data(), name=st.sampled_from(NAMES), batch=st.booleans())
def test_api_rejects_bad_values_naming_feature_and_range(
    scorer: TestClient, data: st.DataObject, name: str, batch: bool
) -> None:
    value = data.draw(st.one_of(out_of_range(name), wrong_types))
    features = {**PATIENT, name: value}
    if batch:
        body, field = {"patients": [{"features": PATIENT}, {"features": features}]}, "patients.1"
        response = scorer.post("/v1/risk/batch", json=body)
    else:
        field = ""
        response = scorer.post("/v1/risk", json={"features": features})
    _assert_names_feature(response, f"{field}.features.{name}".lstrip("."), name)


@API
@given(name=st.sampled_from(NAMES), literal=st.sampled_from(NON_FINITE), fhir=st.booleans())
def test_api_rejects_non_finite_json_tokens(
    scorer: TestClient, name: str, literal: str, fhir: bool
) -> None:
    """NaN and Infinity are not JSON but Python's parser reads them (and 1e400 as infinity)."""
    marker = 123456789
    text = json.dumps({"features": {**PATIENT, name: marker}})
    assume(str(marker) in text)
    response = scorer.post("/v1/risk/fhir" if fhir else "/v1/risk",
                           content=text.replace(str(marker), literal),
                           headers={"content-type": "application/json",
                                    # FHIR errors are OperationOutcomes unless asked
                                    "accept": "application/problem+json"})
    _assert_names_feature(response, f"features.{name}", name)
