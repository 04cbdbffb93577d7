"""The optimizer a job's noisy gradients drive: SGD with momentum, or Adam whose epsilon is the
known noise level.

Both see only the released noisy gradient (clipped sum plus Gaussian noise, over the expected
batch size), so whatever they compute from it is post-processing: the mechanism, and so the
privacy charge, is the same for both. The settings below are public: the noise multiplier, the
clip norm, the sample rate and the row count, never a statistic of the rows.

Adam (the default, ``app.jobs.recipe`` explains the choice) divides each coordinate's step by
the root of a running mean of its squared noisy gradient plus epsilon. Epsilon is not the usual
1e-8 but ``ADAM_NOISE_EPSILON`` times the noise's standard deviation on one coordinate of that
gradient, sigma C / int(q n): where the gradient is well above the noise Adam rescales it (a
feature that uses a small part of its declared range, or a rare outcome, no longer learns tens
of times slower than the others); where it is within the noise, the denominator stays between
5 and about 6 noise stds and the step is close to momentum SGD at learning rate lr / (6 noise
stds), so the noise is not blown up to a full-size step.
"""

import torch
from torch import nn

OPTIMIZERS = ("sgd", "adam")
ADAM_BETA2 = 0.99
"""Adam's second-moment decay: a memory of about 100 steps, so that the large gradients of
the first steps stop damping the later ones (0.999 remembers them for a whole run)."""
ADAM_NOISE_EPSILON = 5.0
"""Adam's epsilon in standard deviations of the gradient noise (bench/proxy_study.py and the
crisis generator: 5 against 1, 3 and 10, see ``app.jobs.recipe``)."""
NON_PRIVATE_EPSILON = 1e-8  # torch's default, for noise-free (public, non-private) training


def gradient_noise_std(*, noise_multiplier: float, max_grad_norm: float, sample_rate: float,
                       n_train: int) -> float:
    """Std of the Gaussian noise on each coordinate of the gradient the optimizer sees:
    sigma C over the expected batch size ``int(n q)``, as both engines (and Opacus) divide."""
    return noise_multiplier * max_grad_norm / max(1, int(n_train * sample_rate))


def make_optimizer(
    network: nn.Module,
    *,
    name: str,
    learning_rate: float,
    momentum: float,
    noise_std: float,
    fused: bool = False,
) -> torch.optim.Optimizer:
    """The job's optimizer on ``network``'s parameters.

    Args:
        name: "sgd" or "adam".
        learning_rate: the step size (Adam: per coordinate, in parameter units).
        momentum: SGD's momentum; Adam's beta1.
        noise_std: ``gradient_noise_std`` of the job (0: non-private).
        fused: torch's fused kernel (same arithmetic, fewer Python loops per step).

    Raises:
        ValueError: an unknown ``name``.
    """
    if name == "sgd":
        return torch.optim.SGD(network.parameters(), lr=learning_rate, momentum=momentum,
                               fused=fused)
    if name == "adam":
        epsilon = ADAM_NOISE_EPSILON * noise_std if noise_std > 0 else NON_PRIVATE_EPSILON
        return torch.optim.Adam(network.parameters(), lr=learning_rate,
                                betas=(momentum, ADAM_BETA2), eps=epsilon, fused=fused)
    raise ValueError(f"unknown optimizer {name!r}; expected one of {OPTIMIZERS}")


@torch.no_grad()
def restart(optimizer: torch.optim.Optimizer) -> None:
    """Back to a fresh start, in place: zero moments, momentum buffers and step counters, so
    the next step equals a fresh optimizer's first (a captured CUDA graph keeps reading the
    same tensors; a federation's site starts each round from the global weights this way)."""
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                value.zero_()
