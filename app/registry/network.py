"""The networks the service trains, built by their family (``app.families``)."""

import torch
from torch import nn

from app.families import create_family
from app.families.base import DEFAULT_HIDDEN_UNITS

BUILT_IN_INPUTS = 6
"""Inputs of the built-in schema's models (its six features, one input each)."""


def build_network(kind: str, hidden_units: int = DEFAULT_HIDDEN_UNITS,
                  n_inputs: int = BUILT_IN_INPUTS) -> nn.Module:
    """The network of the family named ``kind``, tagged with it (the families own the
    networks; this is the short spelling tests and benches use).

    ``n_inputs`` is the schema's encoded width (``app.datasets.schema.encoding.Encoder.n_inputs``).

    Raises:
        UnknownFamily: no family of that name (a ``ValueError``).
    """
    return create_family(kind).network(n_inputs, hidden_units)


@torch.no_grad()
def predict_logits(network: nn.Module, x_scaled: torch.Tensor) -> torch.Tensor:
    network.eval()
    return network(x_scaled).squeeze(-1)
