"""What a model family is: one small interface every model kind implements.

A family owns everything that differs between model kinds, so that jobs, the registry, the
scorer and the worker look it up by name (``app.families.registry.create_family``) instead of
branching on the name or guessing it from layer shapes: its network (built from the schema's
encoded input width and its hyper-parameters), its default recipe, its artifact config, its
per-sample gradients, its explanation hook and the ``DpEvent`` its training spends.

Defaults here fit a torch network trained with DP-SGD on the BCE-with-logits loss; a family
overrides only what differs (a closed-form gradient, a linear explanation, another event).

A family whose model is not trained by DP-SGD names another ``trainer`` (the worker's
``worker.trainers`` registry fits it) and plans its one release from public quantities
(``plan_release``): the planner reserves that event, the ledger charges it whole.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from dp_accounting import DpEvent

from app.privacy import events

if TYPE_CHECKING:  # torch is imported where a network is built or run, not by the API's start
    import torch
    from torch import nn

    from app.datasets.schema.dataset_schema import DatasetSchema
    from app.families.gradients import PerSampleGradients

FAMILY_TAG = "dp_family"
"""The attribute a family sets on each network it builds: the network names its family
explicitly, so the engine and the scorer never infer it from the layers."""

DEFAULT_HIDDEN_UNITS = 16
"""The hidden width of a request or an artifact that names none (``TrainingConfig``)."""

DP_SGD = "dp_sgd"
"""The default trainer's name: a torch network trained by DP-SGD, charged by steps."""


class PlanRefused(ValueError):
    """A family cannot plan this request (a setting it does not take, a target out of its
    reach): the planner answers a 422 naming ``field``."""

    def __init__(self, message: str, *, field: str, allowed: str | None = None) -> None:
        super().__init__(message)
        self.field, self.allowed = field, allowed


@dataclass(frozen=True)
class ReleaseRequest:
    """What a family may plan its release from: public quantities only (the request, the
    parts' row counts, the declared schema), never a statistic of the rows.

    Attributes:
        target_epsilon: the request's target at ``delta`` (None when it names a noise).
        noise_multiplier: the request's noise multiplier (None when it names a target).
        delta: the job's delta, resolved.
        n_train, n_calibration, n_evaluation: the parts' public row counts.
        n_inputs: the schema's encoded width.
        schema: the dataset's declared schema (public bounds, categories).
        training: the request's training settings (``TrainingConfig``, dumped).
    """

    target_epsilon: float | None
    noise_multiplier: float | None
    delta: float
    n_train: int
    n_calibration: int
    n_evaluation: int
    n_inputs: int
    schema: DatasetSchema
    training: Mapping[str, Any]


@dataclass(frozen=True)
class ReleasePlan:
    """A family's planned release: the dp-accounting event the ledger reserves and charges
    whole, the equivalent Gaussian noise multiplier shown on the job, and the settings its
    trainer reads (stored with the job's training request)."""

    event: DpEvent
    noise_multiplier: float
    settings: dict[str, Any] = field(default_factory=dict)


class Family(ABC):  # noqa: B024 - every hook has a default; a family overrides what differs
    """One model kind. Subclasses set ``name`` and ``learning_rates`` and build the network
    (a DP-SGD family), or set ``trainer`` and plan their release (``plan_release``).

    Attributes:
        name: the kind's name in requests (``training.model``), artifacts and the database.
        learning_rates: the default learning rate per optimizer (``adam``, ``sgd``), in
            parameter units per step, chosen on public data (``app.jobs.recipe``).
    """

    name: ClassVar[str]
    learning_rates: ClassVar[Mapping[str, float]]
    trainer: ClassVar[str] = DP_SGD
    """The worker's trainer that fits this family (``worker.trainers``)."""

    @property
    def dp_sgd(self) -> bool:
        """Trained by DP-SGD (charged by steps): what federation, the white-box audit and the
        accounted search need."""
        return self.trainer == DP_SGD

    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        """A fresh network of ``n_inputs`` encoded inputs and one logit out (every DP-SGD
        family builds one; a fitted family's trainer builds its module)."""
        raise NotImplementedError(f"family {self.name!r} builds no network to train")

    def plan_release(self, request: ReleaseRequest) -> ReleasePlan:
        """The one release a family that is not trained by DP-SGD makes, from public
        quantities (``request``). A DP-SGD family is planned by steps (``app.jobs.service``).

        Raises:
            PlanRefused: the request is outside what the family takes (a 422).
        """
        raise NotImplementedError(f"family {self.name!r} is planned by DP-SGD's steps")

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
