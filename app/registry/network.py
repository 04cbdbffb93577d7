"""The model families the service trains; shared by the worker and the scorer."""

import torch
from torch import nn

CRISIS_INPUTS = 6
"""Inputs of the built-in crisis schema's models (its six features, one input each)."""


def build_network(kind: str, hidden_units: int = 16, n_inputs: int = CRISIS_INPUTS) -> nn.Module:
    """A logistic model or a small MLP (tanh: bounded activations suit clipped DP-SGD).

    ``n_inputs`` is the schema's encoded width (``app.datasets.encoding.Encoder.n_inputs``).
    """
    if kind == "logistic":
        return nn.Sequential(nn.Linear(n_inputs, 1))
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(n_inputs, hidden_units), nn.Tanh(), nn.Linear(hidden_units, 1)
        )
    raise ValueError(f"unknown model kind {kind!r}")


@torch.no_grad()
def predict_logits(network: nn.Module, x_scaled: torch.Tensor) -> torch.Tensor:
    network.eval()
    return network(x_scaled).squeeze(-1)
