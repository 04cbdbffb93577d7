"""White-box one-run audit: Dirac gradient canaries inside the job's own DP-SGD engine.

The strongest auditor of Steinke et al. (2023): it chooses gradients, not records, and sees
every noisy update. The engine's gradient vector gets m extra coordinates, one per canary, that
no model parameter uses. Canary i is included with probability 1/2; at every step an included
canary is Poisson-sampled with the job's rate q and then contributes a gradient of norm exactly
C (the clip norm) on its own coordinate. The engine adds its Gaussian noise to those coordinates
as to every other, so the sum of canary i's coordinate over all noisy updates is, times B / C
(B the expected batch size),

    included:     Binomial(T, q) + sigma N(0, T)        excluded:     sigma N(0, T)

exactly the mechanism the accountant charged for one record, read by an auditor who knows
everything else. That sum is the score. The excluded canaries also measure the noise the engine
really added: their scores' spread is sigma sqrt(T), whatever sigma the accountant was told.
"""

from typing import Any

import numpy as np
import torch
from torch import nn

from app.datasets.schema.encoding import BUILT_IN_ENCODER
from app.privacy_audit import bounds
from app.registry.network import build_network
from worker.dpsgd import (
    DPSGD,
    Batch,
    PerSampleGradients,
    bind_gradients,
    per_sample_gradients,
    secret_generator,
)
from worker.training import TrainingSpec, make_optimizer


class _WithCanaries:
    """The engine's per-sample gradient rule, plus the sampled canaries' gradients."""

    def __init__(
        self, inner: PerSampleGradients, out: torch.Tensor, weights: torch.Tensor,
        sample_rate: float, rng: torch.Generator,
    ) -> None:
        self.inner, self.out, self.weights = inner, out, weights
        self.sample_rate, self.rng = sample_rate, rng

    def accumulate(self, batch: Batch, clip: torch.Tensor | None) -> None:
        self.inner.accumulate(batch, clip)
        if self.sample_rate >= 1.0:
            self.out.copy_(self.weights)
            return
        sampled = torch.rand(self.weights.shape, generator=self.rng, device=self.weights.device)
        torch.mul(self.weights, sampled < self.sample_rate, out=self.out)


class CanaryDPSGD(DPSGD):
    """The job's DP-SGD engine with one extra gradient coordinate per canary.

    Everything the audit tests is the parent's: sampling of the rows, clipping, the noise draw
    (over all coordinates), the division by the expected batch size and the accountant. Only
    the gradient buffer is widened, and the canaries are written into the new part.
    """

    def __init__(
        self, network: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
        y: torch.Tensor, *, included: torch.Tensor, **engine: Any,
    ) -> None:
        # Eager steps: the canaries' sampling draws from a generator a CUDA graph would replay.
        super().__init__(network, optimizer, x, y, fixed_width=False, **engine)
        n_params, m = len(self._flat), len(included)
        flat = torch.zeros(n_params + m, dtype=self._flat.dtype, device=self._flat.device)
        bind_gradients(network, flat[:n_params])
        weights = included.to(flat.dtype) * float(engine["max_grad_norm"])
        self._grads = _WithCanaries(
            per_sample_gradients(network, flat[:n_params]), flat[n_params:], weights,
            self.sample_rate, secret_generator(flat.device),
        )
        self._flat = flat
        self.canary_sums = torch.zeros(m, dtype=torch.float64, device=flat.device)
        optimizer.register_step_post_hook(self._read_canaries)
        self._n_params = n_params

    def _read_canaries(self, *_: object) -> None:
        """After each step: add this noisy update's canary coordinates to the running sums."""
        self.canary_sums.add_(self._flat[self._n_params :])


def canary_scores(
    x_train: np.ndarray, y_train: np.ndarray, spec: TrainingSpec, included: np.ndarray,
    device: torch.device,
) -> np.ndarray:
    """Run the job's training with gradient canaries; each canary's score in units of C / B."""
    torch.manual_seed(spec.seed)
    network = build_network(spec.kind, spec.hidden_units, BUILT_IN_ENCODER.n_inputs).to(device)
    optimizer = make_optimizer(network, spec, n_train=len(x_train), fused=True)
    engine = CanaryDPSGD(
        network, optimizer,
        torch.as_tensor(BUILT_IN_ENCODER.encode(x_train), dtype=torch.float32, device=device),
        torch.as_tensor(y_train, dtype=torch.float32, device=device),
        included=torch.as_tensor(included, device=device),
        batch_size=spec.batch_size, noise_multiplier=spec.noise_multiplier,
        max_grad_norm=spec.max_grad_norm,
        sampling_rng=secret_generator(device), noise_rng=secret_generator(device),
    )
    planned = abs(engine.sample_rate - spec.sample_rate) <= 1e-12 and (
        engine.steps_per_epoch * spec.epochs == spec.steps
    )
    if not planned:
        raise RuntimeError("the audit's engine does not sample as the job was charged")
    network.train()
    for _ in range(spec.epochs):
        engine.run_epoch()
    engine.release()
    scale_back = engine.expected_batch_size / spec.max_grad_norm
    return engine.canary_sums.cpu().numpy() * scale_back


def audit(
    x_train: np.ndarray, y_train: np.ndarray, spec: TrainingSpec, *, canaries: int, seed: int,
    confidence: float, device: torch.device,
) -> dict[str, Any]:
    """The white-box one-run bound, and the noise multiplier the excluded canaries measured."""
    included = np.random.default_rng([seed, 2]).random(canaries) < 0.5
    scores = canary_scores(x_train, y_train, spec, included, device)
    bound = bounds.audit(scores, included, delta=spec.delta, confidence=confidence)
    out_scores = scores[~included]
    measured = float(np.std(out_scores, ddof=1) / np.sqrt(spec.steps)) if len(out_scores) > 1 \
        else None
    return {
        **bound.as_dict(),
        "canary": "Dirac gradient of norm C on its own coordinate, Poisson-sampled at rate q",
        "score": "sum of the canary's coordinate over all noisy updates, in units of C / B",
        "measured_noise_multiplier": measured,
        "claimed_noise_multiplier": spec.noise_multiplier,
        "mean_score_included": float(np.mean(scores[included])) if included.any() else None,
        "mean_score_excluded": float(np.mean(out_scores)) if len(out_scores) else None,
    }
