"""What a model family is: one small interface every model kind implements.

A family owns everything that differs between model kinds, so that jobs, the registry, the
scorer and the worker look it up by name (``app.families.registry.create_family``) instead of
branching on the name or guessing it from layer shapes: its network (built from the schema's
encoded input width and its hyper-parameters), its default recipe, its artifact config, its
per-sample gradients, its explanation hook and the ``DpEvent`` its training spends.

Defaults here fit a torch network trained with DP-SGD on the BCE-with-logits loss; a family
overrides only what differs (a closed-form gradient, a linear explanation, another event).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from dp_accounting import DpEvent

from app.privacy import events

if TYPE_CHECKING:  # torch is imported where a network is built or run, not by the API's start
    import torch
    from torch import nn

    from app.families.gradients import PerSampleGradients

FAMILY_TAG = "dp_family"
"""The attribute a family sets on each network it builds: the network names its family
explicitly, so the engine and the scorer never infer it from the layers."""

DEFAULT_HIDDEN_UNITS = 16
"""The hidden width of a request or an artifact that names none (``TrainingConfig``)."""


class Family(ABC):
    """One model kind. Subclasses set ``name`` and ``learning_rates`` and build the network.

    Attributes:
        name: the kind's name in requests (``training.model``), artifacts and the database.
        learning_rates: the default learning rate per optimizer (``adam``, ``sgd``), in
            parameter units per step, chosen on public data (``app.jobs.recipe``).
    """

    name: ClassVar[str]
    learning_rates: ClassVar[Mapping[str, float]]

    @abstractmethod
    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        """A fresh network of ``n_inputs`` encoded inputs and one logit out."""

    def network(self, n_inputs: int, hidden_units: int = DEFAULT_HIDDEN_UNITS) -> nn.Module:
        """``build``, tagged with this family (what training, loading and scoring call)."""
        network = self.build(n_inputs, hidden_units)
        setattr(network, FAMILY_TAG, self.name)
        return network

    def default_learning_rate(self, optimizer: str) -> float:
        """The learning rate of a request that leaves it to the default."""
        return self.learning_rates[optimizer]

    def artifact_config(self, *, hidden_units: int) -> dict[str, Any]:
        """The family's part of an artifact's config: what ``from_artifact`` needs to rebuild
        the network. ``kind`` stays for readers that predate the ``family`` key."""
        return {"kind": self.name, "family": self.name, "hidden_units": hidden_units}

    def from_artifact(self, config: Mapping[str, Any], n_inputs: int) -> nn.Module:
        """An empty network shaped as the artifact's config says (weights loaded after)."""
        return self.network(n_inputs, int(config.get("hidden_units", DEFAULT_HIDDEN_UNITS)))

    def per_sample_gradients(
        self, network: nn.Module, out: torch.Tensor
    ) -> PerSampleGradients | None:
        """A closed-form per-sample gradient rule writing into ``out``, or None for the
        engine's ``torch.func`` rule (exact for any network, slower)."""
        return None

    def linear_weights(self, network: nn.Module) -> np.ndarray | None:
        """The input weights when the log-odds are linear in the inputs (their Shapley values
        then have a closed form), else None for the exact coalition enumeration."""
        return None

    def additive_terms(self, network: nn.Module
                       ) -> Callable[[np.ndarray], np.ndarray] | None:
        """For an additive model (log-odds = intercept + one term per declared feature): encoded
        rows (m, inputs) -> each feature's term (m, features), whose differences from the
        reference patient's are its exact Shapley values; else None."""
        return None

    def training_event(self, *, noise_multiplier: float, sample_rate: float,
                       steps: int) -> DpEvent:
        """What training spends: ``steps`` self-composed Poisson-subsampled Gaussians
        (noise multiplier 0 or less: non-private)."""
        return events.dpsgd(noise_multiplier, sample_rate, steps)
