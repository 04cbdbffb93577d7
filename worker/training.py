"""DP-SGD training: Poisson sampling, per-sample clipping of the whole gradient, Gaussian noise.

Two engines run the same mechanism with the same accounting:

* ``vectorised`` (default, ``worker.dpsgd``): the table stays in memory on the device and
  per-sample gradients come from closed forms; an order of magnitude faster than Opacus here.
* ``opacus``: Opacus' ``make_private`` with a DataLoader; the reference the vectorised engine is
  tested against.

Both record spend in an Opacus accountant through the optimizer's step hook; after each epoch the
trainer reads that history (never the loss or any other statistic of the training rows).
"""

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from opacus import PrivacyEngine
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from app.datasets.schema.encoding import BUILT_IN_ENCODER, Encoder
from app.privacy import accounting
from app.registry.network import build_network, predict_logits
from worker import optimizer as optimizers
from worker.dpsgd import DPSGD, secret_generator

ENGINES = ("vectorised", "opacus")


@dataclass(frozen=True)
class TrainingSpec:
    """What the worker needs of a job, detached from the database session."""

    kind: str
    hidden_units: int
    epochs: int
    batch_size: int
    learning_rate: float
    momentum: float
    max_grad_norm: float
    noise_multiplier: float  # 0: non-private
    sample_rate: float
    steps: int
    delta: float
    seed: int
    engine: str = "vectorised"  # or "opacus" (make_private with a DataLoader)
    tail_average: float = 0.0  # average the iterates of this last fraction of steps
    world_size: int = 1  # > 1: torchrun processes with Opacus' DPDDP (worker.launch)
    optimizer: str = "sgd"  # or "adam" (``worker.optimizer``; the API's default is adam)


@dataclass
class TrainingResult:
    network: nn.Module
    epochs_completed: int
    history: list[tuple[float, float, int]] = field(default_factory=list)
    stopped_early: bool = False


EpochCallback = Callable[[int, list[tuple[float, float, int]]], bool]
"""Called after each epoch with (epoch, accountant history); returns False to stop."""


def pick_device(preference: str = "auto") -> torch.device:
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def batch_loss(criterion: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The batch's loss; zero (still in the graph) for an empty batch.

    An empty Poisson batch still takes a (noise-only) step: skipping it would leak that the
    batch was empty. A zero loss keeps the graph so Opacus adds the noise.
    """
    if y.numel() == 0:
        return logits.sum() * 0.0
    return criterion(logits, y)


def train(
    x_train: np.ndarray,
    y_train: np.ndarray,
    spec: TrainingSpec,
    *,
    device: torch.device,
    on_epoch: EpochCallback | None = None,
    encoder: Encoder = BUILT_IN_ENCODER,
    fixed_width: bool | None = None,
    planned_rows: int | None = None,
) -> TrainingResult:
    """Train ``spec.kind`` on raw rows (encoded here with the schema's public scaling) and
    return the network. ``fixed_width`` None: CUDA-graph steps on a GPU, eager on the CPU
    (``worker.fixed_width``); the benchmark forces either.

    Raises:
        ValueError: unknown ``spec.engine``.
        RuntimeError: the sampling would differ from the sample rate and steps the ledger charged.
    """
    if spec.engine not in ENGINES:
        raise ValueError(f"unknown training engine {spec.engine!r}; expected one of {ENGINES}")
    torch.manual_seed(spec.seed)  # initial weights only: they do not depend on the data
    network = build_network(spec.kind, spec.hidden_units, encoder.n_inputs).to(device)
    # The vectorised engine's steps are microseconds, so the optimizer's per-parameter Python
    # loop shows: its fused kernel (same arithmetic) halves that. Opacus keeps the default.
    rows = len(x_train) if planned_rows is None else planned_rows  # public: the plan's
    optimizer = make_optimizer(network, spec, n_train=rows, fused=spec.engine == "vectorised")
    x = torch.as_tensor(encoder.encode(x_train), dtype=torch.float32)
    y = torch.as_tensor(y_train, dtype=torch.float32)
    average = TailAverage(optimizer, first_step=first_averaged_step(spec))
    if spec.engine == "vectorised":
        result = _train_vectorised(network, optimizer, x.to(device), y.to(device), spec, on_epoch,
                                   fixed_width, rows)
    else:
        result = _train_opacus(network, optimizer, x, y, spec, device, on_epoch, rows)
    average.apply_to(result.network)
    return result


def make_optimizer(network: nn.Module, spec: TrainingSpec, *, n_train: int,
                   fused: bool = False) -> torch.optim.Optimizer:
    """The job's optimizer (``worker.optimizer``) for ``n_train`` training rows."""
    noise_std = optimizers.gradient_noise_std(noise_multiplier=spec.noise_multiplier,
                                              max_grad_norm=spec.max_grad_norm,
                                              sample_rate=spec.sample_rate, n_train=n_train)
    return optimizers.make_optimizer(network, name=spec.optimizer, learning_rate=spec.learning_rate,
                                     momentum=spec.momentum, noise_std=noise_std, fused=fused)


def first_averaged_step(spec: TrainingSpec) -> int:
    """1-based index of the first step in the averaged tail (past the end: no averaging)."""
    if spec.tail_average <= 0:
        return spec.steps + 1
    return spec.steps - max(1, round(spec.tail_average * spec.steps)) + 1


class TailAverage:
    """Running mean of the parameters over the last steps (Polyak-Ruppert tail averaging).

    Post-processing of the noisy iterates, so it costs no privacy; it averages much of the
    noise away. Hooked on the optimizer the job created (Opacus' DPOptimizer calls it too).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, first_step: int) -> None:
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.first_step = first_step
        self.step = 0
        self.count = 0
        self.mean = [torch.zeros_like(p) for p in self.params]
        optimizer.register_step_post_hook(self._after_step)

    @torch.no_grad()
    def _after_step(self, *_: object) -> None:
        self.step += 1
        if self.step < self.first_step:
            return
        self.count += 1
        for mean, p in zip(self.mean, self.params, strict=True):
            mean.add_(p - mean, alpha=1.0 / self.count)

    @torch.no_grad()
    def apply_to(self, network: nn.Module) -> None:
        """Replace ``network``'s weights by the tail mean (a no-op if no step was averaged)."""
        if self.count == 0:
            return
        for target, mean in zip(network.parameters(), self.mean, strict=True):
            target.copy_(mean.to(target.device))


def _train_vectorised(
    network: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    spec: TrainingSpec,
    on_epoch: EpochCallback | None,
    fixed_width: bool | None = None,
    planned_rows: int | None = None,
) -> TrainingResult:
    # Sampling and noise must be secret: a seeded, known generator would let anyone replay
    # the batches and subtract the noise. Fresh OS entropy per job, never stored.
    engine = DPSGD(
        network, optimizer, x, y,
        batch_size=spec.batch_size,
        noise_multiplier=spec.noise_multiplier,
        max_grad_norm=spec.max_grad_norm,
        sampling_rng=secret_generator(x.device),
        noise_rng=secret_generator(x.device),
        fixed_width=fixed_width,
        planned_rows=planned_rows,
    )
    check_plan(spec, engine.sample_rate, engine.steps_per_epoch)
    network.train()
    result = _run_epochs(spec, engine.run_epoch, lambda: engine.history, on_epoch, network)
    engine.release()
    taken = sum(steps for _, _, steps in result.history)
    if engine.private and taken != result.epochs_completed * engine.steps_per_epoch:
        raise RuntimeError(f"accountant recorded {taken} steps, not the planned ones")
    return result


def padded_rows(x: torch.Tensor, y: torch.Tensor, rows: int | None) -> TensorDataset:
    """(x, y, weight): the rows read, padded to the part's public size ``rows`` with zero rows
    of weight 0, so that Opacus samples the planned table at the planned rate (its expected
    batch is the planned one) and each step's work does not depend on how many patients the
    release left out (``worker.dpsgd.Table`` does the same)."""
    padding = 0 if rows is None else max(0, rows - len(x))
    weight = torch.cat([torch.ones(len(x)), torch.zeros(padding)]).to(x.dtype)
    if padding:
        x = torch.cat([x, x.new_zeros(padding, x.shape[1])])
        y = torch.cat([y, y.new_zeros(padding)])
    return TensorDataset(x, y, weight)


def _train_opacus(
    network: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    spec: TrainingSpec,
    device: torch.device,
    on_epoch: EpochCallback | None,
    planned_rows: int | None = None,
) -> TrainingResult:
    sampling_rng = secret_generator(torch.device("cpu"))  # the DataLoader samples on the CPU
    noise_rng = secret_generator(device)
    rows = padded_rows(x, y, planned_rows)
    loader: DataLoader[Any] = DataLoader(rows, batch_size=spec.batch_size, shuffle=True,
                                         generator=sampling_rng)
    engine: PrivacyEngine | None = None
    if spec.noise_multiplier > 0:
        with warnings.catch_warnings():
            # secure_mode needs torchcsprng (unmaintained); the RNGs above are secret-seeded.
            warnings.simplefilter("ignore")
            engine = PrivacyEngine(accountant="prv", secure_mode=False)
            network, optimizer, loader = engine.make_private(
                module=network,
                optimizer=optimizer,
                data_loader=loader,
                noise_multiplier=spec.noise_multiplier,
                max_grad_norm=spec.max_grad_norm,
                poisson_sampling=True,
                clipping="flat",  # one norm over all parameters: the whole gradient
                noise_generator=noise_rng,
            )
        check_plan(spec, getattr(loader, "sample_rate", None), len(loader))
    # Opacus' hooks fire on module outputs because inputs need no gradient: expected, harmless.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    criterion = nn.BCEWithLogitsLoss(reduction="none")

    def weighted(logits: torch.Tensor, yb: torch.Tensor, wb: torch.Tensor) -> torch.Tensor:
        return (criterion(logits, yb) * wb).mean()

    def run_epoch() -> None:
        network.train()
        for xb, yb, wb in loader:
            xb, yb, wb = xb.to(device), yb.to(device), wb.to(device)
            optimizer.zero_grad(set_to_none=True)
            logits = network(xb).squeeze(-1)
            (logits.sum() * 0.0 if yb.numel() == 0 else weighted(logits, yb, wb)).backward()
            optimizer.step()

    def history() -> list[tuple[float, float, int]]:
        return list(engine.accountant.history) if engine else []

    return _run_epochs(spec, run_epoch, history, on_epoch, network)


def _run_epochs(
    spec: TrainingSpec,
    run_epoch: Callable[[], None],
    history: Callable[[], list[tuple[float, float, int]]],
    on_epoch: EpochCallback | None,
    network: nn.Module,
) -> TrainingResult:
    """The epoch loop both engines share: history and the stop decision after every epoch."""
    result = TrainingResult(network=network, epochs_completed=0)
    for epoch in range(1, spec.epochs + 1):
        run_epoch()
        result.epochs_completed = epoch
        result.history = history()
        if on_epoch is not None and not on_epoch(epoch, result.history):
            result.stopped_early = epoch < spec.epochs
            break
    result.network = _unwrap(network)
    return result


def check_plan(spec: TrainingSpec, sample_rate: float | None, steps_per_epoch: int) -> None:
    """The sampler must sample exactly as the ledger was charged (rate and step count)."""
    if sample_rate is None or abs(sample_rate - spec.sample_rate) > 1e-12:
        raise RuntimeError(f"sample rate {sample_rate} differs from planned {spec.sample_rate}")
    if steps_per_epoch * spec.epochs != spec.steps:
        raise RuntimeError(
            f"{steps_per_epoch * spec.epochs} steps differ from the planned {spec.steps}"
        )


def _unwrap(network: nn.Module) -> nn.Module:
    inner = getattr(network, "_module", network)
    return inner.cpu().eval()


def epsilon_of(history: list[tuple[float, float, int]], delta: float) -> tuple[float, float]:
    """(PRV, RDP) epsilon of the accountant's history at ``delta``."""
    mechanisms = [accounting.Mechanism(s, q, n) for s, q, n in history]
    figures = accounting.epsilon_by_accountant(mechanisms, delta)
    return figures["prv"], figures["rdp"]


def predict_log_odds(
    network: nn.Module, x_raw: np.ndarray, encoder: Encoder = BUILT_IN_ENCODER
) -> np.ndarray:
    """The model's log-odds for raw feature rows (the schema's encoding, as in scoring)."""
    x = torch.as_tensor(encoder.encode(x_raw), dtype=torch.float32)
    return predict_logits(network, x).double().numpy()


def predict_proba(
    network: nn.Module, x_raw: np.ndarray, encoder: Encoder = BUILT_IN_ENCODER
) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-predict_log_odds(network, x_raw, encoder)))
