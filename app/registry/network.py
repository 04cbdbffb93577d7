"""The model families the service trains; shared by the worker and the scorer."""

import torch
from torch import nn

from app.features import N_FEATURES


def build_network(kind: str, hidden_units: int = 16) -> nn.Module:
    """A logistic model or a small MLP (tanh: bounded activations suit clipped DP-SGD)."""
    if kind == "logistic":
        return nn.Sequential(nn.Linear(N_FEATURES, 1))
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(N_FEATURES, hidden_units), nn.Tanh(), nn.Linear(hidden_units, 1)
        )
    raise ValueError(f"unknown model kind {kind!r}")


@torch.no_grad()
def predict_logits(network: nn.Module, x_scaled: torch.Tensor) -> torch.Tensor:
    network.eval()
    return network(x_scaled).squeeze(-1)
