"""A score output format is its module alone: a module holding a ``Format`` dropped into
``app.formats`` is found in its place in the order, chosen by ``Accept`` and served by the
scoring route; the built-in formats keep their order, JSON first."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import app.formats as package
from app.core import plugins
from app.formats import registry
from app.formats.base import Format
from tests.api.scoring_helpers import train_models
from tests.conftest import PATIENT

TOY_FORMAT = '''
from app.formats.base import Format
from app.scoring.answer import RiskAnswer


def single(answer: RiskAnswer) -> bytes:
    return f"{answer.probability[0]:.6f}".encode()


FORMAT = Format("text/x-toy-probability", single, None, "the probability alone", order=15)
'''


def test_the_built_in_formats_are_found_in_order() -> None:
    assert [f.media_type for f in registry.FORMATS] == [
        "application/json", "application/fhir+json", "text/csv"]


@pytest.fixture
def toy_format(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Format]:
    folder = tmp_path / "formats"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY_FORMAT)
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
    importlib.invalidate_caches()
    found = tuple(plugins.members(package, Format, skip=("base", "registry")))
    monkeypatch.setattr(registry, "FORMATS", found)
    yield next(f for f in found if f.media_type == "text/x-toy-probability")
    sys.modules.pop(f"{package.__name__}.toy", None)


def test_a_dropped_in_format_is_chosen_and_served(toy_format: Format, client: TestClient,
                                                  run_worker: Any) -> None:
    assert [f.media_type for f in registry.FORMATS] == [
        "application/json", "application/fhir+json", "text/x-toy-probability", "text/csv"]
    assert registry.choose("text/x-toy-probability", "single") is toy_format
    with pytest.raises(registry.NotAcceptable):
        registry.choose("text/x-toy-probability", "batch")  # it offers no batch

    train_models(client, run_worker)
    plain = client.post("/v1/risk", json={"features": PATIENT}).json()
    toy = client.post("/v1/risk", json={"features": PATIENT},
                      headers={"Accept": "text/x-toy-probability"})
    assert toy.status_code == 200, toy.text
    assert toy.headers["content-type"].startswith("text/x-toy-probability")
    assert float(toy.text) == pytest.approx(plain["probability"], abs=1e-6)
