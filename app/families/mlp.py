"""The small MLP: one tanh hidden layer (bounded activations suit clipped DP-SGD), its
per-sample gradient norms in closed form."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.families.base import Family
from app.families.gradients import clip_factor

if TYPE_CHECKING:  # imported where a network is built or trained, not by the API's start
    import torch
    from torch import nn

    from app.families.gradients import Batch, PerSampleGradients


class MLPGradients:
    """h = tanh(W1 x + b1), z = w2.h + b2; per-sample norms from the closed form, no loops.

    With r = dL/dz and a = r w2 (1 - h^2) = dL/d(W1 x + b1), a sample's squared gradient norm is
    |a|^2 (|x|^2 + 1) (from W1, b1) + r^2 (|h|^2 + 1) (from w2, b2).
    """

    def __init__(self, first: nn.Linear, last: nn.Linear, out: torch.Tensor) -> None:
        d, h = first.in_features, first.out_features
        self.w1t, self.b1 = first.weight.t(), first.bias
        self.w2, self.b2 = last.weight[0], last.bias
        self.out = out
        self.g_w1 = out[: h * d].view(h, d)
        self.g_b1 = out[h * d : h * (d + 1)]
        self.g_w2 = out[h * (d + 1) : h * (d + 2)]
        self.g_b2 = out[h * (d + 2) :]

    def accumulate(self, batch: Batch, clip: torch.Tensor | None) -> None:
        import torch

        if len(batch.y) == 0:
            self.out.zero_()
            return
        hidden = torch.addmm(self.b1, batch.x, self.w1t).tanh_()
        r = torch.addmv(self.b2, hidden, self.w2).sigmoid_().sub_(batch.y)
        if batch.weight is not None:  # padding rows: a zero residual, so a zero gradient
            r.mul_(batch.weight)
        hidden_sq = hidden * hidden
        a = torch.rsub(hidden_sq, 1.0).mul_(self.w2).mul_(r.unsqueeze(1))
        if clip is not None:
            norms = (a * a).sum(dim=1).mul_(batch.sq_norm)
            norms.addcmul_(r * r, hidden_sq.sum(dim=1).add_(1.0)).sqrt_()
            factor = clip_factor(norms, clip)
            a.mul_(factor.unsqueeze(1))
            r.mul_(factor)
        torch.mm(a.t(), batch.x, out=self.g_w1)
        torch.sum(a, dim=0, out=self.g_b1)
        torch.mv(hidden.t().contiguous(), r, out=self.g_w2)  # no MKL threads: see dpsgd.Table
        torch.sum(r, dim=0, keepdim=True, out=self.g_b2)


class MLP(Family):
    """Linear -> tanh -> linear. Adam's default lr 0.1 (the tanh layer does not take the
    logistic model's 0.3), SGD's 0.5 (``app.jobs.recipe``)."""

    name = "mlp"
    learning_rates = {"adam": 0.1, "sgd": 0.5}

    def build(self, n_inputs: int, hidden_units: int) -> nn.Module:
        from torch import nn

        return nn.Sequential(
            nn.Linear(n_inputs, hidden_units), nn.Tanh(), nn.Linear(hidden_units, 1)
        )

    def per_sample_gradients(
        self, network: nn.Module, out: torch.Tensor
    ) -> PerSampleGradients | None:
        from torch import nn

        first, _, last = network.children()
        if not (isinstance(first, nn.Linear) and isinstance(last, nn.Linear)):
            raise TypeError("not a network this family built")
        return MLPGradients(first, last, out)
