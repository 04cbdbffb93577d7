"""The declared schema: the API contract parses, each rule is a 422 naming its field and what is
allowed, the hash ignores spelling, and the generator's schema matches ``app.features``."""

import copy
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.bands import model_thresholds
from app.core.errors import InvalidRequest, install_error_handlers
from app.datasets import synthetic
from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.datasets.schema.checks import check_schema
from app.datasets.schema.dataset_schema import NAME_PATTERN, DatasetSchema, FeatureKind, schema_hash
from app.features import FEATURES

CONTRACT: dict[str, Any] = {
    "features": [
        {"name": "phq9", "label": "PHQ-9", "kind": "integer", "lower": 0, "upper": 27,
         "reference": 5, "unit": "points",
         "code": {"system": "http://loinc.org", "code": "44261-6", "display": "PHQ-9 total"}},
        {"name": "sex", "kind": "categorical", "categories": ["female", "male", "other"],
         "reference": "female"},
        {"name": "prior_crisis", "kind": "binary", "reference": 0},
    ],
    "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days", "positive": 1,
                "bands": {"low_medium": 0.05, "medium_high": 0.2}},
    "subgroups": ["sex"],
    "id_column": "patient_id",
}


def _parse(document: dict[str, Any]) -> DatasetSchema:
    return DatasetSchema.model_validate(document)


def test_the_contract_example_is_a_valid_schema() -> None:
    schema = _parse(CONTRACT)
    check_schema(schema)
    assert schema.columns == ["patient_id", "phq9", "sex", "prior_crisis", "crisis_30d"]
    assert [f.kind for f in schema.features] == ["integer", "categorical", "binary"]
    assert schema.features[1].reference_value == 0.0  # "female" is code 0
    assert schema.features[0].model_range == (0.0, 27.0)
    assert schema.model_dump(mode="json")["features"][0]["upper"] == 27  # not 27.0


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to the contract: ``features.0.upper`` -> value (None deletes the key)."""
    *parents, last = path.split(".")

    def change(document: dict[str, Any]) -> None:
        node: Any = document
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        key: Any = int(last) if last.isdigit() else last
        if value is None:
            del node[key]
        else:
            node[key] = value
    return change


def _features(n: int) -> list[dict[str, Any]]:
    return [{"name": f"x{i}", "kind": "binary", "reference": 0} for i in range(n)]


RULES = [  # (change, field named, a piece of what is allowed)
    (_set("features.2.name", "phq9"), "schema.features[2].name", "unique"),
    (_set("features.0.name", "probability"), "schema.features[0].name", "any name but"),
    (_set("features.0.name", "PHQ9"), "schema.features[0].name", NAME_PATTERN),
    (_set("features.0.name", "_phq9"), "schema.features[0].name", NAME_PATTERN),
    (_set("features.0.name", "9phq"), "schema.features[0].name", NAME_PATTERN),
    (_set("features.0.name", "phq-9"), "schema.features[0].name", NAME_PATTERN),
    (_set("features.0.name", "p" * 65), "schema.features[0].name", NAME_PATTERN),
    (_set("features.0.lower", 27), "schema.features[0].upper", "(27, inf)"),
    (_set("features.0.lower", 30), "schema.features[0].upper", "(30, inf)"),
    (_set("features.0.lower", None), "schema.features[0].lower", "a number"),
    (_set("features.0.upper", 27.5), "schema.features[0].upper", "whole numbers"),
    (_set("features.0.reference", 28), "schema.features[0].reference", "[0, 27]"),
    (_set("features.0.reference", -1), "schema.features[0].reference", "[0, 27]"),
    (_set("features.0.reference", 5.5), "schema.features[0].reference", "whole numbers"),
    (_set("features.0.reference", "5"), "schema.features[0].reference", "[0, 27]"),
    (_set("features.0.model_upper", 30), "schema.features[0].model_upper", "[0, 27]"),
    (_set("features.0.model_lower", -1), "schema.features[0].model_lower", "[0, 27]"),
    (_set("features.0.model_upper", 0), "schema.features[0].model_upper", "(0, 27]"),
    (_set("features.0.categories", ["a", "b"]), "schema.features[0].categories", "absent"),
    (_set("features.1.categories", []), "schema.features[1].categories", "[2, 50]"),
    (_set("features.1.categories", ["female"]), "schema.features[1].categories", "[2, 50]"),
    (_set("features.1.categories", [f"c{i}" for i in range(51)]),
     "schema.features[1].categories", "[2, 50]"),
    (_set("features.1.categories", ["female", "female"]),
     "schema.features[1].categories[1]", "unique"),
    (_set("features.1.categories", ["female", ""]),
     "schema.features[1].categories[1]", "1 to 64"),
    (_set("features.1.categories", ["female", "m" * 65]),
     "schema.features[1].categories[1]", "1 to 64"),
    (_set("features.1.reference", "unknown"), "schema.features[1].reference", "one of"),
    (_set("features.1.lower", 0), "schema.features[1].lower", "absent"),
    (_set("features.2.reference", 2), "schema.features[2].reference", "0 or 1"),
    (_set("features.2.upper", 2), "schema.features[2].upper", "0 / 1"),
    (_set("features.2.model_upper", 1), "schema.features[2].model_upper", "absent"),
    (_set("outcome.name", "phq9"), "schema.outcome.name", "unique"),
    (_set("outcome.name", "Crisis"), "schema.outcome.name", NAME_PATTERN),
    (_set("id_column", "sex"), "schema.id_column", "unique"),
    (_set("id_column", "crisis_30d"), "schema.id_column", "unique"),
    (_set("id_column", "Patient ID"), "schema.id_column", NAME_PATTERN),
    (_set("features", []), "schema.features", "[1, 200]"),
    (_set("features", _features(201)), "schema.features", "[1, 200]"),
    (_set("subgroups", ["race"]), "schema.subgroups[0]", "one of ['sex', 'prior_crisis']"),
    (_set("subgroups", ["phq9"]), "schema.subgroups[0]", "one of"),
    (_set("subgroups", ["sex", "sex"]), "schema.subgroups[1]", "unique"),
    (_set("attributes", [{"name": "sex", "categories": ["a", "b"]}]),
     "schema.attributes[0].name", "unique"),
    (_set("attributes", [{"name": "site", "categories": ["a"]}]),
     "schema.attributes[0].categories", "[2, 50]"),
]


@pytest.mark.parametrize(("change", "field", "allowed"), RULES,
                         ids=[f"{field}:{i}" for i, (_, field, _a) in enumerate(RULES)])
def test_each_rule_is_a_422_naming_the_field_and_what_is_allowed(
    change: Callable[[dict[str, Any]], None], field: str, allowed: str
) -> None:
    document = copy.deepcopy(CONTRACT)
    change(document)
    with pytest.raises(InvalidRequest) as caught:
        check_schema(_parse(document))
    assert caught.value.status == 422
    assert caught.value.field == field
    assert allowed in caught.value.extra["allowed"]
    assert caught.value.detail.startswith(field)


@pytest.mark.parametrize("change", [
    _set("features.0.kind", "float"),
    _set("features.0.unknown", 1),
    _set("features.0.upper", float("inf")),
    _set("features.0.missing", "drop"),
    _set("outcome.positive", 2),
    _set("features.0.code", {"system": "http://loinc.org"}),
])
def test_shape_errors_are_pydantic_validation_errors(
    change: Callable[[dict[str, Any]], None]
) -> None:
    document = copy.deepcopy(CONTRACT)
    change(document)
    with pytest.raises(ValidationError):
        _parse(document)


def test_an_optional_model_range_and_imputation_are_accepted() -> None:
    document = copy.deepcopy(CONTRACT)
    document["features"][0] |= {"model_lower": 0, "model_upper": 20, "missing": "reference"}
    document["features"].append({"name": "score", "kind": "numeric", "lower": -1.5,
                                 "upper": 2.25, "reference": 0.1})
    schema = _parse(document)
    check_schema(schema)
    assert schema.features[0].model_range == (0.0, 20.0)
    assert schema.features[3].kind is FeatureKind.NUMERIC


def test_a_rule_renders_as_problem_json_with_field_and_allowed() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/schema")
    def declare(body: DatasetSchema) -> dict[str, str]:
        check_schema(body)
        return {"hash": schema_hash(body)}

    document = copy.deepcopy(CONTRACT)
    document["features"][0]["reference"] = 40
    response = TestClient(app).post("/schema", json=document)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"] == [{
        "field": "schema.features[0].reference",
        "message": "schema.features[0].reference: must be a number within the bounds",
        "allowed": "[0, 27]",
    }]


def test_the_hash_ignores_key_order_number_spelling_and_defaults() -> None:
    respelled = {
        "id_column": "patient_id",
        "attributes": [],
        "subgroups": ["sex"],
        "outcome": {"bands": {"medium_high": 0.20, "low_medium": 0.050}, "positive": 1,
                    "label": "Crisis within 30 days", "name": "crisis_30d"},
        "features": [
            {**CONTRACT["features"][0], "lower": 0.0, "reference": 5.0, "missing": "error"},
            *CONTRACT["features"][1:],
        ],
    }
    assert schema_hash(_parse(respelled)) == schema_hash(_parse(CONTRACT))
    changed = copy.deepcopy(CONTRACT)
    changed["features"][0]["upper"] = 26
    assert schema_hash(_parse(changed)) != schema_hash(_parse(CONTRACT))
    assert len(schema_hash(BUILT_IN_SCHEMA)) == 64


def test_a_models_thresholds_are_the_declared_bands_else_the_legacy_default() -> None:
    declared = copy.deepcopy(CONTRACT)
    declared["outcome"]["bands"] = {"low_medium": 0.1, "medium_high": 0.3}
    assert model_thresholds(_parse(declared).outcome.bands) == {"low_medium": 0.1,
                                                                "medium_high": 0.3}
    stored_before_bands = copy.deepcopy(CONTRACT)
    del stored_before_bands["outcome"]["bands"]
    legacy = _parse(stored_before_bands).outcome.bands
    assert model_thresholds(legacy) == {"low_medium": 0.05, "medium_high": 0.2}
    assert model_thresholds(BUILT_IN_SCHEMA.outcome.bands) == {"low_medium": 0.05,
                                                             "medium_high": 0.2}
    copied = model_thresholds(legacy)
    copied["low_medium"] = 0.9  # each model gets its own copy, never the default itself
    assert model_thresholds(legacy)["low_medium"] == 0.05


def test_the_generator_schema_is_the_feature_spec() -> None:
    check_schema(BUILT_IN_SCHEMA)
    assert BUILT_IN_SCHEMA.feature_names == [f.name for f in FEATURES]
    for spec, feature in zip(BUILT_IN_SCHEMA.features, FEATURES, strict=True):
        assert spec.kind == feature.kind
        assert spec.bounds == (feature.lower, feature.upper)
        assert spec.reference_value == feature.reference
        model_upper = feature.upper if feature.model_upper is None else feature.model_upper
        assert spec.model_range == (feature.lower, model_upper)
        assert spec.label == feature.label and (spec.unit or "") == feature.unit
        assert (spec.code.code if spec.code else None) == feature.loinc
    assert BUILT_IN_SCHEMA.features[3].model_upper == 15
    table = synthetic.generate(50, 7)
    sex_codes, sex_labels = synthetic.subgroups(table.x, table.sex)["sex"]
    assert BUILT_IN_SCHEMA.attributes[0].categories == sex_labels  # the generator's draws
    assert set(sex_codes.tolist()) == set(range(len(sex_labels)))
    assert BUILT_IN_SCHEMA.subgroups == ["sex"]
    assert "sex" not in BUILT_IN_SCHEMA.feature_names  # a subgroup the model never sees
