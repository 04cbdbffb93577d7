"""Input that must be refused, each as a 4xx problem+json naming the field.

A key given twice, a body that is not JSON, a flag that is not a boolean, an invisible character
in a name, a number too long to read: none of them may be guessed at, and none may be a 500.
"""

import json
import re
import unicodedata
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel, Field, ValidationError

from app.core.json_body import JsonRoute, parse
from app.core.schemas import NO_CONTROL_CHARACTERS, TEXT_RULE
from app.main import create_app
from tests.api.test_bad_input import assert_problem, snapshot
from tests.conftest import PATIENT, SMALL_DATASET, small_dataset

JSON = {"content-type": "application/json"}


def _features(**changes: Any) -> str:
    return json.dumps({"features": {**PATIENT, **changes}})


# --------------------------------------------------------------------------- duplicate keys


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
@pytest.mark.parametrize(
    ("path", "content", "field"),
    [
        pytest.param("/v1/risk", _features()[:-2] + ', "prior_crisis": 0}}',
                     "features.prior_crisis", id="nested"),
        pytest.param("/v1/risk", '{"features": {"prior_crisis": 99, "prior_crisis": 0}}',
                     "features.prior_crisis", id="issue-example"),
        pytest.param("/v1/datasets", json.dumps(small_dataset())[:-1] + ', "name": "other"}',
                     "name", id="top-level"),
        pytest.param("/v1/risk/batch",
                     '{"patients": [{"id": "a", "features": ' + json.dumps(PATIENT) + '}, '
                     '{"id": "b", "features": {"age": 30, "age": 31}}]}',
                     "patients.1.features.age", id="batch-item"),
        pytest.param("/v1/jobs", '{"dataset_id": 1, "dataset_id": 1, "privacy": {}}',
                     "dataset_id", id="same-value-twice"),
    ],
)
def test_a_key_given_twice_is_422_naming_its_path(
    client: TestClient, path: str, content: str, field: str
) -> None:
    before = snapshot(client)
    body = assert_problem(client.post(path, content=content, headers=JSON), 422, field=field,
                          kind="validation-error")
    assert "more than once" in body["detail"], body
    assert snapshot(client) == before


def test_equal_keys_in_different_objects_are_fine() -> None:
    assert parse(b'{"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 3}, {"x": 4}]}')["c"][1]["x"] == 4


# --------------------------------------------------------------------------- content type


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/xml", "text/json", None,
])
def test_a_json_route_refuses_other_media_types_with_415(
    client: TestClient, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    before = snapshot(client)
    response = client.post("/v1/datasets", content=json.dumps(small_dataset()), headers=headers)
    assert_problem(response, 415, field="Content-Type", allowed=("application/json",),
                   kind="unsupported-media-type")
    assert snapshot(client) == before


@pytest.mark.parametrize("content_type", [
    "application/json", "application/json; charset=utf-8", "Application/JSON",
    "application/merge-patch+json",
])
def test_json_and_json_suffix_media_types_are_read(client: TestClient, content_type: str) -> None:
    response = client.post("/v1/datasets", content=json.dumps(small_dataset()),
                           headers={"content-type": content_type})
    assert response.status_code == 201, response.text


def test_the_fhir_route_reads_fhir_json(client: TestClient) -> None:
    """Any answer but 415: the body was read (no model is trained here)."""
    response = client.post("/v1/risk/fhir", content=json.dumps({"features": PATIENT}),
                           headers={"content-type": "application/fhir+json"})
    assert response.status_code != 415, response.text
    assert response.status_code < 500, response.text


def test_an_upload_still_takes_csv(client: TestClient) -> None:
    """The table upload is not a JSON route: CSV reaches it (here: no such dataset, 404)."""
    response = client.put("/v1/datasets/999/data", content=b"a,b\n1,2\n",
                          headers={"content-type": "text/csv"})
    assert_problem(response, 404)


def test_requests_without_a_body_are_unaffected(client: TestClient, dataset: dict[str, Any]
                                                ) -> None:
    assert client.get("/v1/datasets").status_code == 200
    assert client.delete("/v1/keys/999").status_code == 404
    # A POST that takes no body needs no Content-Type, and one that needs a body says so.
    assert client.post("/v1/jobs/999/cancel").status_code == 404
    assert_problem(client.post("/v1/datasets"), 422, field="body")


def test_every_json_body_route_reads_strictly() -> None:
    """A router without ``route_class=JsonRoute`` would take repeated keys again."""

    def routes(items: list[Any]) -> list[Any]:
        found = []
        for item in items:
            inner = getattr(item, "original_router", None)
            found += routes(inner.routes) if inner is not None else [item]
        return found

    with_body = [r for r in routes(create_app().routes)
                 if isinstance(r, APIRoute) and r.body_field is not None]
    assert len(with_body) >= 8, with_body
    assert [r.path for r in with_body if not isinstance(r, JsonRoute)] == []


def test_a_route_wrapping_json_route_can_still_read_the_body() -> None:
    """The body is read through the request a wrapper holds (a scoring route rereads it to
    gather more errors): reading it again must not wait for a body already consumed."""

    class Rereading(JsonRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def route(request: Request) -> Response:
                response = await handler(request)
                response.headers["x-keys"] = ",".join(await request.json())
                return response

            return route

    class Body(BaseModel):
        a: int

    router = APIRouter(route_class=Rereading)

    @router.post("/echo")
    def echo(body: Body) -> dict[str, int]:
        return {"a": body.a}

    app = FastAPI()
    app.include_router(router)
    with TestClient(app) as client:
        response = client.post("/echo", content=b'{"a": 1, "b": 2}', headers=JSON)
    assert response.status_code == 200 and response.json() == {"a": 1}, response.text
    assert response.headers["x-keys"] == "a,b"


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
def test_415_is_documented_on_every_route_that_reads_a_body(client: TestClient) -> None:
    """Every JSON body, and the upload's CSV or Parquet body: a body of another type is a 415."""
    for path, item in client.get("/openapi.json").json()["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            reads_a_body = "application/json" in content or "text/csv" in content
            assert ("415" in operation["responses"]) == reads_a_body, (method, path)


# --------------------------------------------------------------------------- strict booleans


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
@pytest.mark.parametrize("value", ["yes", "true", 1, 0, "on", "1", [], {}])
def test_a_boolean_is_true_or_false_only(client: TestClient, value: Any) -> None:
    before = snapshot(client)
    response = client.post("/v1/datasets", json=small_dataset(public=value))
    assert_problem(response, 422, field="public", allowed=("true or false",))
    assert snapshot(client) == before


@pytest.mark.parametrize("value", [True, False])
def test_json_booleans_are_accepted(client: TestClient, value: bool) -> None:
    body = small_dataset(public=value)
    if value:
        body.pop("privacy_budget")
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text
    assert response.json()["public"] is value


# --------------------------------------------------------------------------- invisible characters


INVISIBLE = [
    pytest.param("\u202eevil.csv", "U+202E", id="rtl-override"),
    pytest.param("ad\u200bmin", "U+200B", id="zero-width-space"),
    pytest.param("\u2066cohort\u2069", "U+2066", id="isolate"),
    pytest.param("\ufeffcohort", "U+FEFF", id="bom"),
    pytest.param("soft\u00adhyphen", "U+00AD", id="soft-hyphen"),
    pytest.param("tag\U000e0041", "U+E0041", id="tag-character"),
    pytest.param("two\u2028lines", "U+2028", id="line-separator"),
    pytest.param("next\x85line", "U+0085", id="c1-control"),
]


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
@pytest.mark.parametrize(("name", "code"), INVISIBLE)
def test_format_characters_in_dataset_names_are_422(
    any_client: TestClient, name: str, code: str
) -> None:
    before = snapshot(any_client)
    response = any_client.post("/v1/datasets", json=small_dataset(name=name))
    body = assert_problem(response, 422, field="name", allowed=(TEXT_RULE,))
    assert code in body["errors"][0]["message"], body
    assert snapshot(any_client) == before


def test_format_characters_in_schema_labels_are_422(client: TestClient) -> None:
    schema = {"features": [{"name": "phq9", "label": "PHQ\u202e-9", "kind": "integer",
                            "lower": 0, "upper": 27, "reference": 5}],
              "outcome": {"name": "crisis_30d", "label": "Crisis within 30 days", "positive": 1,
                          "bands": {"low_medium": 0.05, "medium_high": 0.2}},
              "id_column": "patient_id"}
    response = client.post("/v1/datasets", json=small_dataset(
        source={"kind": "upload"}, schema=schema))
    assert_problem(response, 422, field="schema.features.0.label")


def test_format_characters_in_text_filters_are_422(client: TestClient) -> None:
    response = client.get("/v1/audit-log", params={"actor": "admin\u200b"})
    assert_problem(response, 422, field="actor")


def test_joiners_stay_allowed_for_emoji_and_scripts(client: TestClient) -> None:
    # A health worker emoji (woman, ZWJ, staff of Aesculapius) and Persian with a ZWNJ.
    name = "\U0001f469\u200d\u2695\ufe0f \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    response = client.post("/v1/datasets", json=small_dataset(name=name))
    assert response.status_code == 201, response.text
    assert response.json()["name"] == name


class _Text(BaseModel):
    text: str = Field(pattern=NO_CONTROL_CHARACTERS)


def test_every_format_character_is_refused_by_both_regex_engines() -> None:
    """Python's re (category checks) and pydantic's Rust regex (fields) read the pattern alike."""
    joiners = {0x200C, 0x200D}
    refused = [c for c in range(0x110000)
               if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp") and c not in joiners]
    assert len(refused) > 200
    assert [hex(c) for c in refused if re.fullmatch(NO_CONTROL_CHARACTERS, chr(c))] == []
    for ch in map(chr, refused):
        with pytest.raises(ValidationError):
            _Text(text=f"a{ch}b")
    assert _Text(text="a\u200cb\u200d").text


# --------------------------------------------------------------------------- 405 Allow


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
def test_405_keeps_its_allow_header(client: TestClient) -> None:
    response = client.delete("/v1/features")
    assert_problem(response, 405)
    assert response.headers["allow"] == "GET", response.headers


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
def test_405_lists_every_method_of_every_route_at_the_path(client: TestClient) -> None:
    """``PUT`` and ``DELETE .../data`` are two routes: ``Allow`` names both."""
    response = client.get("/v1/datasets/1/data")
    assert_problem(response, 405)
    assert response.headers["allow"] == "DELETE, PUT", response.headers


@pytest.mark.slow  # with the others marked here, seconds on 2 cores: the full suite runs it
def test_a_literal_path_with_another_method_is_405_not_422(client: TestClient) -> None:
    """``POST /v1/models/rollback`` exists; ``GET`` there is not a malformed model id."""
    response = client.get("/v1/models/rollback")
    assert_problem(response, 405)
    assert response.headers["allow"] == "POST"
    assert_problem(client.get("/v1/models/abc"), 422)  # a bad id is still a 422


# --------------------------------------------------------------------------- truncated JSON


@pytest.mark.parametrize(
    ("content", "offset"),
    [
        pytest.param('{"name": "x", "pri', 14, id="truncated"),
        pytest.param('{"name": "\u00e9\u00e9", }', 17, id="offset-in-bytes"),
        pytest.param("", None, id="empty"),
    ],
)
def test_a_body_that_is_not_json_is_422_on_the_body(
    client: TestClient, content: str, offset: int | None
) -> None:
    body = assert_problem(client.post("/v1/datasets", content=content.encode(), headers=JSON),
                          422, field="body")
    if offset is not None:
        assert body["offset"] == offset, body
        assert f"invalid JSON at byte {offset}" in body["detail"], body


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b'{"name": "\xff"}', id="not-utf8"),
        pytest.param(b"[" * 100_000, id="nested-too-deep"),
    ],
)
def test_an_unreadable_body_is_422_on_the_body(client: TestClient, content: bytes) -> None:
    assert_problem(client.post("/v1/datasets", content=content, headers=JSON), 422, field="body")


# --------------------------------------------------------------------------- long integers


def _long(text: str, value: str, digits: str) -> str:
    """``text`` with the JSON number ``value`` replaced by ``digits``."""
    assert value in text
    return text.replace(value, digits, 1)


@pytest.mark.parametrize(
    ("path", "content", "field"),
    [
        pytest.param("/v1/risk", _long(_features(), "22", "9" * 5000), "features.phq9",
                     id="feature"),
        pytest.param("/v1/risk", _long(_features(), "34", "-" + "1" * 5000), "features.age",
                     id="negative"),
        pytest.param("/v1/datasets", _long(json.dumps(SMALL_DATASET), "2000", "7" * 10**6),
                     "source.n_rows", id="a-megabyte-of-digits"),
        pytest.param("/v1/risk/batch", _long(json.dumps(
            {"patients": [{"id": "a", "features": PATIENT}]}), "35", "5" * 4301),
                     "patients.0.features.gaf", id="batch"),
    ],
)
def test_an_integer_too_long_to_read_is_422_naming_the_field(
    client: TestClient, path: str, content: str, field: str
) -> None:
    response = client.post(path, content=content, headers=JSON)
    body = assert_problem(response, 422, field=field)
    assert "digits" in body["detail"], body  # refused at the digit limit, never converted


def test_a_long_integer_names_its_allowed_range_where_one_is_known(client: TestClient) -> None:
    content = _long(json.dumps(SMALL_DATASET), "2000", "1" * 4301)
    assert_problem(client.post("/v1/datasets", content=content, headers=JSON), 422,
                   field="source.n_rows", allowed=("[100, 2000000]",))
