"""The family registry: names to families, networks tagged with theirs, and the one rule that
derives the family of an artifact stored before configs named it."""

from pathlib import Path

import pytest
import torch

from app.datasets.schema.built_in_schema import BUILT_IN_SCHEMA
from app.families import (
    UnknownFamily,
    create_family,
    family_names,
    family_of,
    family_of_network,
    legacy_family_of,
    register_family,
)
from app.families.logistic import Logistic
from app.privacy import accounting, events
from app.registry import artifacts
from app.registry.network import build_network


def test_built_in_families_by_name() -> None:
    assert family_names()[:2] == ("logistic", "mlp")
    assert family_of is create_family
    assert create_family("logistic").default_learning_rate("adam") == 0.3
    assert create_family("mlp").default_learning_rate("adam") == 0.1
    assert create_family("mlp").default_learning_rate("sgd") == 0.5
    with pytest.raises(UnknownFamily):
        create_family("tree")
    with pytest.raises(ValueError, match="already registered"):
        register_family(Logistic())


@pytest.mark.parametrize("name", ["logistic", "mlp"])
def test_networks_name_their_family(name: str) -> None:
    network = build_network(name, 8, 5)
    assert family_of_network(network) is create_family(name)
    assert family_of_network(network.double()) is create_family(name)  # survives .to/.double
    assert family_of_network(torch.nn.Sequential(torch.nn.Linear(5, 1))) is None


def test_training_spends_dpsgd_event() -> None:
    event = create_family("mlp").training_event(noise_multiplier=1.5, sample_rate=0.1, steps=7)
    assert repr(event).startswith("SelfComposedDpEvent(event=PoissonSampledDpEvent(")
    assert event.count == 7 and event.event.sampling_probability == 0.1
    assert event.event.event.noise_multiplier == 1.5
    # The event the ledger stores for a training job (its Mechanism) is the family's.
    assert events.canonical(event) == events.canonical(accounting.Mechanism(1.5, 0.1, 7).event)


def test_legacy_family_of_reads_the_config_first() -> None:
    mlp_weights = build_network("mlp", 4).state_dict()
    assert legacy_family_of({"family": "mlp", "kind": "logistic"}).name == "mlp"
    assert legacy_family_of({"kind": "mlp"}, {}).name == "mlp"
    # Neither named: the original two families' rule, here and nowhere else.
    assert legacy_family_of({}, build_network("logistic").state_dict()).name == "logistic"
    assert legacy_family_of({}, mlp_weights).name == "mlp"
    with pytest.raises(UnknownFamily):
        legacy_family_of({"kind": "tree"})


@pytest.mark.parametrize("stored", [{"kind": "mlp"}, {}])
def test_artifact_without_family_key_still_loads(tmp_path: Path, stored: dict[str, str]) -> None:
    """An artifact written before configs had ``family`` (and one with no kind at all)."""
    network = build_network("mlp", 4, 6)
    config = artifacts.artifact_config(kind="mlp", hidden_units=4, calibration="platt",
                                       schema=BUILT_IN_SCHEMA)
    assert config["family"] == "mlp" == config["kind"]
    legacy = {k: v for k, v in config.items() if k not in ("family", "kind")} | stored
    sha = artifacts.save(network, legacy, root=tmp_path)
    loaded, loaded_config = artifacts.load(sha, root=tmp_path)
    assert loaded_config["family"] == "mlp"
    assert family_of_network(loaded) is create_family("mlp")
    x = torch.randn(3, 6)
    assert torch.equal(loaded(x), network.eval()(x))
