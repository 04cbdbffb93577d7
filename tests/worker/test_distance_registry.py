"""A drift distance is its module plus its two fields on the run's schema: a module dropped into
``worker.monitoring.distances`` is found and reported by a monitoring run's feature drift, and
every registered distance has its released fields on ``FeatureDriftOut``."""

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from app.core import plugins
from app.monitoring.schemas import FeatureDriftOut
from app.privacy.annotations import Released
from worker.monitoring import distances
from worker.monitoring.distances import DISTANCES
from worker.monitoring.drift import NoisyHistogram, feature_drift

TOY = '''
import numpy as np

from worker.monitoring.distances.registry import Distance, register


def toy(reference: np.ndarray, follow_up: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The total variation distance between the two histograms' proportions."""
    p = reference / reference.sum(axis=-1, keepdims=True)
    q = follow_up / follow_up.sum(axis=-1, keepdims=True)
    return np.abs(p - q).sum(axis=-1) / 2


TOY = register(Distance("toy", toy, threshold=None))
'''


@pytest.fixture
def toy_distance(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    folder = tmp_path / "distances"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY)
    monkeypatch.setattr(distances, "__path__", [*distances.__path__, str(folder)])
    importlib.invalidate_caches()
    registered = dict(DISTANCES)
    try:
        plugins.modules(distances, skip=("estimate", "registry"))
        yield
    finally:
        DISTANCES.clear()
        DISTANCES.update(registered)
        sys.modules.pop(f"{distances.__name__}.toy", None)


def test_the_built_in_distances_register_in_their_modules_order() -> None:
    assert list(DISTANCES) == ["psi", "wasserstein"]


def test_a_dropped_in_distance_is_reported_by_the_feature_drift(toy_distance: None) -> None:
    assert list(DISTANCES) == ["psi", "wasserstein", "toy"]
    reference = NoisyHistogram(np.array([400.0, 300.0, 200.0, 100.0]), 1.0)
    follow_up = NoisyHistogram(np.array([100.0, 200.0, 300.0, 400.0]), 1.0)
    out = feature_drift(reference, follow_up, centres=np.arange(4.0),
                        rng=np.random.default_rng(0), n_bootstrap=50)
    assert out["toy"] == pytest.approx(0.4, abs=0.02)
    low, high = out["toy_ci"]
    assert low <= out["toy"] <= high


def test_every_registered_distance_is_a_released_field_of_the_run() -> None:
    fields = FeatureDriftOut.model_fields
    for name in DISTANCES:
        for field in (name, f"{name}_ci"):
            assert field in fields, f"FeatureDriftOut lacks {field}"
            assert any(isinstance(m, Released) for m in fields[field].metadata), field
