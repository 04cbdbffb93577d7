"""The per-sample gradient seam every family plugs into, and the rule that fits any network.

The DP-SGD engine (``worker.dpsgd``) asks a network's family for the fastest exact rule that
writes the sum of clipped per-sample gradients; a family without a closed form gets
``FunctionalGradients`` (``torch.func``: slower, the same arithmetic). The clipping here is
Opacus' flat clipping, so every rule releases the same mechanism.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:  # imported where a step runs, so that the API's start never loads torch
    import torch
    from torch import nn

CLIP_EPSILON = 1e-6  # Opacus' flat clipping adds it to the norm before dividing


class Batch(NamedTuple):
    """One Poisson batch, its columns cut once per block so that a step does no slicing."""

    x: torch.Tensor  # (B, d) scaled features
    x1t: torch.Tensor  # (d + 1, B) features and a row of ones, transposed: [weight, bias] grads
    sq_norm: torch.Tensor  # (B,) |x|^2 + 1, the squared norm of [x, 1]
    norm: torch.Tensor  # (B,) its square root
    y: torch.Tensor  # (B,) labels 0/1
    weight: torch.Tensor | None = None  # (B,) 1 for a sampled row, 0 for padding (fixed width)


class PerSampleGradients(Protocol):
    """Writes the sum of (clipped) per-sample gradients of the BCE-with-logits loss into ``out``.

    ``out`` is the flat gradient, parameters in ``network.parameters()`` order, whose contiguous
    views are the parameters' ``.grad``. ``clip`` None sums without clipping (non-private).
    """

    def accumulate(self, batch: Batch, clip: torch.Tensor | None) -> None: ...


def clip_factor(norms: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
    """Opacus' flat clipping, same operations in the same order: min(1, C / (norm + 1e-6))."""
    import torch

    return torch.div(clip, norms.add_(CLIP_EPSILON)).clamp_max_(1.0)


class FunctionalGradients:
    """Any network: ``vmap(grad(loss))`` over the batch (slower than a closed form, same
    arithmetic); what a new family gets until it brings its own rule."""

    def __init__(self, network: nn.Module, out: torch.Tensor) -> None:
        from torch import nn
        from torch.func import functional_call, grad, vmap

        self.params = dict(network.named_parameters())
        self.out = out

        def loss(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            logit = functional_call(network, params, (x[None],)).reshape(())
            return nn.functional.binary_cross_entropy_with_logits(logit, y)

        self._per_sample = vmap(grad(loss), in_dims=(None, 0, 0))

    def accumulate(self, batch: Batch, clip: torch.Tensor | None) -> None:
        import torch

        if len(batch.y) == 0:
            self.out.zero_()
            return
        detached = {k: v.detach() for k, v in self.params.items()}
        grads = self._per_sample(detached, batch.x, batch.y)
        flat = torch.cat([g.reshape(len(batch.y), -1) for g in grads.values()], dim=1)
        if batch.weight is not None:
            flat = flat * batch.weight.unsqueeze(1)
        if clip is not None:
            flat = flat * clip_factor(flat.norm(dim=1), clip).unsqueeze(1)
        torch.sum(flat, dim=0, out=self.out)
