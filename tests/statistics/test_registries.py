"""A statistics mechanism or query kind is its module alone: a module dropped into the
registry's package is found, a request may name it (validation and OpenAPI read the registry)
and the release is answered with it; an unknown word is still the 422 listing the allowed ones.
"""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core import plugins
from app.statistics import mechanisms, queries
from app.statistics.mechanisms.base import Mechanism
from app.statistics.queries.base import Statistic
from tests.conftest import small_dataset
from tests.statistics.helpers import ask, fields_of

TOY_MECHANISM = '''
from app.statistics.mechanisms.gaussian import Gaussian


class ToyGaussian(Gaussian):
    name = "toy_gaussian"
    order = 99
    words = "toy Gaussian noise"


TOY = ToyGaussian()
'''

TOY_KIND = '''
from app.statistics.queries.count import Count


class ToyCount(Count):
    kind, order = "toy_count", 99
    estimator = "a toy's noisy count per cell"


TOY = ToyCount()
'''


def _drop_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, package: ModuleType,
             text: str, kind: type) -> list[Any]:
    """``text`` as module ``toy`` of ``package`` (a folder put on its ``__path__`` for this test),
    and the members the package's discovery then finds."""
    folder = tmp_path / package.__name__.rsplit(".", 1)[-1]
    folder.mkdir()
    (folder / "toy.py").write_text(text)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    importlib.invalidate_caches()
    return plugins.members(package, kind)


@pytest.fixture
def toy_mechanism(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    found = _drop_in(monkeypatch, tmp_path, mechanisms, TOY_MECHANISM, Mechanism)
    monkeypatch.setattr(mechanisms, "MECHANISMS", {m.name: m for m in found})
    yield
    sys.modules.pop(f"{mechanisms.__name__}.toy", None)


@pytest.fixture
def toy_kind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    found = _drop_in(monkeypatch, tmp_path, queries, TOY_KIND, Statistic)
    monkeypatch.setattr(queries, "STATISTICS", {s.kind: s for s in found})
    yield
    sys.modules.pop(f"{queries.__name__}.toy", None)


@pytest.fixture
def dataset_id(client: TestClient) -> int:
    return int(client.post("/v1/datasets", json=small_dataset()).json()["id"])


def _enum(client: TestClient, component: str) -> list[str]:
    return list(client.get("/openapi.json").json()["components"]["schemas"][component]["enum"])


def test_a_dropped_in_mechanism_is_named_served_and_listed(
        toy_mechanism: None, client: TestClient, dataset_id: int) -> None:
    assert mechanisms.names() == ("gaussian", "laplace", "toy_gaussian")
    body = {"queries": [{"kind": "count"}], "privacy": {"epsilon": 1, "mechanism": "toy_gaussian"}}
    response = ask(client, dataset_id, body)
    assert response.status_code == 201, response.text
    release = response.json()
    assert release["privacy"]["mechanism"] == "toy_gaussian"
    assert "toy Gaussian noise" in release["privacy"]["statement"]
    shown = client.get(f"/v1/statistics/{release['id']}").json()
    assert shown["privacy"]["mechanism"] == "toy_gaussian"
    assert _enum(client, "NoiseMechanism") == ["gaussian", "laplace", "toy_gaussian"]


def test_a_dropped_in_query_kind_is_named_served_and_listed(
        toy_kind: None, client: TestClient, dataset_id: int) -> None:
    body = {"queries": [{"kind": "toy_count", "by": ["sex"]}], "privacy": {"epsilon": 1}}
    response = ask(client, dataset_id, body)
    assert response.status_code == 201, response.text
    answer = response.json()["answers"][0]
    assert answer["kind"] == "toy_count" and answer["estimator"] == "a toy's noisy count per cell"
    assert len(answer["cells"]) == 2
    assert _enum(client, "QueryKind")[-1] == "toy_count"


@pytest.mark.parametrize(("body", "field", "allowed"), [
    ({"queries": [{"kind": "median"}], "privacy": {"epsilon": 1}}, "queries[0].kind",
     "'count', 'sum', 'mean', 'histogram' or 'prevalence'"),
    ({"queries": [{"kind": "count"}], "privacy": {"epsilon": 1, "mechanism": "exponential"}},
     "privacy.mechanism", "'gaussian' or 'laplace'"),
])
def test_an_unknown_word_is_a_422_listing_the_registered_ones(
        client: TestClient, dataset_id: int, body: dict, field: str, allowed: str) -> None:
    response = ask(client, dataset_id, body)
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert fields_of(problem) == [field]
    assert problem["errors"][0]["message"] == f"Input should be {allowed}"
