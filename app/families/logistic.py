"""The logistic model: one linear layer, its per-sample gradients and Shapley values in
closed form. The default family (``TrainingConfig.model``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from app.families.base import Family
from app.families.gradients import clip_factor

if TYPE_CHECKING:  # imported where a network is built or trained, not by the API's start
    import torch
    from torch import nn

    from app.families.gradients import Batch, PerSampleGradients


class LogisticGradients:
    """z = w.x + b; per sample dL/dz = sigmoid(z) - y =: r, gradient r [x, 1], norm |r| |[x, 1]|."""

    def __init__(self, linear: nn.Linear, out: torch.Tensor) -> None:
        self.w, self.b = linear.weight[0], linear.bias  # views: they follow the optimizer
        self.out = out

    def accumulate(self, batch: Batch, clip: torch.Tensor | None) -> None:
        import torch

        if len(batch.y) == 0:
            self.out.zero_()
            return
        r = torch.addmv(self.b, batch.x, self.w).sigmoid_().sub_(batch.y)
        if batch.weight is not None:  # padding rows: a zero residual, so a zero gradient
            r.mul_(batch.weight)
        if clip is not None:
            r.mul_(clip_factor(torch.abs(r).mul_(batch.norm), clip))
        torch.mv(batch.x1t, r, out=self.out)


def _linear(network: nn.Module) -> nn.Linear:
    from torch import nn

    (layer,) = network.children()
    if not isinstance(layer, nn.Linear):
        raise TypeError("not a network this family built")
    return layer


class Logistic(Family):
    """Log-odds linear in the encoded inputs. Adam's default lr 0.3, SGD's 0.5
    (``app.jobs.recipe`` says how they were chosen)."""

    name = "logistic"
    learning_rates = {"adam": 0.3, "sgd": 0.5}

    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        from torch import nn

        return nn.Sequential(nn.Linear(n_inputs, 1))

    def per_sample_gradients(
        self, network: nn.Module, out: torch.Tensor
    ) -> PerSampleGradients | None:
        return LogisticGradients(_linear(network), out)

    def linear_weights(self, network: nn.Module) -> np.ndarray | None:
        return _linear(network).weight.detach().double().numpy()[0]
