"""DP-EBM (``dp_ebm``): InterpretML's differentially private explainable boosting, fitted by
its own trainer (``worker.trainers.dp_ebm``) and charged as the one event it releases.

The plan is ``ebm_accounting``'s, from public quantities only (the target, delta and the
declared features); the bins come from the declared schema (``ebm_layout``); the scoring model
is ``ebm_network.AdditiveNetwork`` over the encoded inputs, whose per-feature terms are its
exact Shapley values. docs/families.md says what it releases and what it cannot do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from app.families.base import FAMILY_TAG, Family, PlanRefused, ReleasePlan, ReleaseRequest
from app.families.ebm_accounting import EbmNoise, EbmRecipe, plan

if TYPE_CHECKING:  # torch loads where a network is built or run, not at the API's start
    from torch import nn


def noise_of(settings: Mapping[str, Any]) -> EbmNoise:
    """The planned noise a job stored (``DpEbm.plan_release``'s settings), as planned."""
    return EbmNoise(EbmRecipe(**settings["recipe"]), float(settings["library_epsilon"]),
                    float(settings["noise_binning"]), float(settings["noise_boosting"]))


class DpEbm(Family):
    """An additive model of one boosted shape function per feature (interpret's defaults:
    32 bins, 300 rounds, learning rate 0.01, a tenth of epsilon for the bins)."""

    name = "dp_ebm"
    learning_rates = {"adam": 0.0, "sgd": 0.0}  # no optimizer: never read
    trainer = "dp_ebm"

    def plan_release(self, request: ReleaseRequest) -> ReleasePlan:
        if request.target_epsilon is None:
            raise PlanRefused(f"model {self.name!r} calibrates its noise from a target "
                              "epsilon: send privacy.target_epsilon",
                              field="privacy.noise_multiplier")
        try:
            noise = plan(EbmRecipe(request.target_epsilon, request.delta,
                                   len(request.schema.features)))
        except ValueError as error:
            raise PlanRefused(str(error), field="privacy.target_epsilon") from error
        return ReleasePlan(event=noise.event, noise_multiplier=noise.equivalent_multiplier,
                           settings={"recipe": dataclasses.asdict(noise.recipe),
                                     "library_epsilon": noise.library_epsilon,
                                     "noise_binning": noise.binning,
                                     "noise_boosting": noise.boosting})

    def from_artifact(self, config: Mapping[str, Any], n_inputs: int) -> nn.Module:
        from app.families.ebm_network import AdditiveNetwork

        network = AdditiveNetwork.from_specs(config["terms"])
        setattr(network, FAMILY_TAG, self.name)
        return network

    def additive_terms(self, network: nn.Module
                       ) -> Callable[[np.ndarray], np.ndarray] | None:
        from app.families.ebm_network import AdditiveNetwork

        return network.numpy_terms if isinstance(network, AdditiveNetwork) else None
