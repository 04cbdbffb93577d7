"""Vectorised DP-SGD on tensors in memory: the same mechanism as Opacus, without a DataLoader.

Per step, exactly as Opacus with ``poisson_sampling=True``, ``clipping="flat"`` and a mean loss:

1. Poisson sampling: every record joins the batch independently with probability q (secret
   generator). Drawn as geometric gaps between chosen rows, so a step costs O(q n), not O(n).
2. Per-sample gradients of the whole parameter vector (the network's family's closed form,
   ``app.families``; ``torch.func`` for anything else), one L2 norm per sample over ALL
   parameters.
3. Clip factor ``min(1, C / (norm + 1e-6))``, sum, add N(0, (sigma C)^2) per coordinate
   (secret generator), divide by the EXPECTED batch size ``int(n q)``.
4. The optimizer (Adam or momentum SGD, ``worker.optimizer``) sees only that noisy gradient.

On a GPU the steps run at one fixed batch width and are replayed as a CUDA graph
(``worker.fixed_width``): the same law and arithmetic, without a kernel launch per operation.

Spend is recorded by an Opacus accountant through the optimizer's step hook, so the history is
the (sigma, q, steps) list Opacus itself would keep.
"""

import math
import secrets
from collections.abc import Iterator

import torch
from opacus.accountants import PRVAccountant
from torch import nn

from app.families import family_of_network
from app.families.gradients import CLIP_EPSILON, Batch, FunctionalGradients, PerSampleGradients
from app.privacy.accounting import poisson_plan
from worker.fixed_width import FixedWidthSteps

__all__ = ["CLIP_EPSILON", "DPSGD", "Batch", "PerSampleGradients", "PoissonSampler", "Table",
           "bind_gradients", "per_sample_gradients", "secret_generator"]
_FunctionalGradients = FunctionalGradients  # the name the engine's tests compare against
_BLOCK_DRAWS = 1 << 20  # uniform draws per sampling block: bounds memory for huge tables


def secret_generator(device: torch.device) -> torch.Generator:
    """A generator seeded from OS entropy and never stored: batches and noise cannot be replayed."""
    return torch.Generator(device=device).manual_seed(secrets.randbits(63))


class PoissonSampler:
    """Exact Poisson subsampling of ``range(n_rows)`` with rate q, in O(q n) work per step.

    The gaps between consecutive chosen rows of a Bernoulli(q) sequence are i.i.d. geometric
    on {1, 2, ...}: ``floor(log(1 - U) / log(1 - q)) + 1`` for U uniform on [0, 1). Each step
    draws enough gaps to pass the end of the table with overwhelming probability (mean + 6 sd)
    and draws more for the rare step that falls short, so the law is exact, not truncated.
    """

    def __init__(
        self,
        n_rows: int,
        sample_rate: float,
        generator: torch.Generator,
        *,
        draws_per_step: int | None = None,
    ) -> None:
        """``draws_per_step`` overrides the first round of gaps per step (tests force refills)."""
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"sample rate {sample_rate} outside (0, 1]")
        self.n_rows = n_rows
        self.sample_rate = sample_rate
        self._generator = generator
        self._log_keep = math.log1p(-sample_rate) if sample_rate < 1.0 else -math.inf
        mean = n_rows * sample_rate
        self.draws_per_step = draws_per_step or int(
            mean + 6.0 * math.sqrt(mean * (1.0 - sample_rate)) + 16
        )
        self._rows_per_block = max(1, _BLOCK_DRAWS // self.draws_per_step)

    def position_blocks(self, steps: int) -> Iterator[torch.Tensor]:
        """Yield (steps of a block, width) sorted positions; those >= n_rows are not chosen.

        The width is ``draws_per_step`` unless a step of the block needed more draws.
        """
        done = 0
        while done < steps:
            rows = min(steps - done, self._rows_per_block)
            yield self._positions(rows)
            done += rows

    def blocks(self, steps: int) -> Iterator[tuple[torch.Tensor, list[int]]]:
        """Yield (chosen rows of several steps concatenated, batch size of each step)."""
        for positions in self.position_blocks(steps):
            yield self.chosen(positions)

    def chosen(self, positions: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        """A position block's chosen rows, concatenated, and the batch size of each step."""
        chosen = positions < self.n_rows
        return positions[chosen], chosen.sum(dim=1).tolist()

    def batches(self, steps: int) -> Iterator[torch.Tensor]:
        """Yield the sorted row indices of each of ``steps`` batches."""
        for rows, counts in self.blocks(steps):
            yield from rows.split(counts)

    def _positions(self, rows: int) -> torch.Tensor:
        positions = self._gaps(rows).cumsum(dim=1) - 1
        # A step is complete once its last position is past the table (the next would be too).
        while bool((positions[:, -1] < self.n_rows - 1).any()):
            more = self._gaps(rows).cumsum(dim=1) + positions[:, -1:]
            positions = torch.cat([positions, more], dim=1)
        return positions

    def _gaps(self, rows: int) -> torch.Tensor:
        device = self._generator.device
        u = torch.rand((rows, self.draws_per_step), generator=self._generator, dtype=torch.float64,
                       device=device)
        return torch.floor(torch.log1p(-u) / self._log_keep).to(torch.int64) + 1


class Table:
    """The training rows on their device, with the per-row constants the closed forms need.

    ``rows``: the part's public size. A release that left patients out holds fewer rows; the
    table is padded to ``rows`` with zero rows of weight 0 (a zero per-sample gradient), so
    every step samples, gathers and computes as many rows as it would with nobody left out:
    the run's duration does not depend on how many were.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor, rows: int | None = None) -> None:
        read = x.shape[0]
        padding = 0 if rows is None else max(0, rows - read)
        if padding:
            x = torch.cat([x, x.new_zeros(padding, x.shape[1])])
            y = torch.cat([y, y.new_zeros(padding)])
        self.n_rows, self.n_features = x.shape
        # Whenever a public size is given the weight is applied, padding or not: the same
        # operations either way (a weight of one changes no figure).
        self.weight = (None if rows is None else
                       torch.cat([x.new_ones(read), x.new_zeros(padding)]))
        ones = torch.ones(self.n_rows, 1, dtype=x.dtype, device=x.device)
        self._x1 = torch.cat([x, ones], dim=1)
        sq_norm = (x * x).sum(dim=1) + 1.0
        self._aux = torch.stack([sq_norm, sq_norm.sqrt(), y.to(x.dtype)], dim=1)

    def batches(self, rows: torch.Tensor, counts: list[int]) -> list[Batch]:
        """Gather the rows of several steps at once and split them into per-step batches.

        The transposed copy makes the per-step gradient product ``x1t @ r`` a plain
        matrix-vector product: MKL multithreads ``x1.t() @ r`` even for 512 rows, and a
        thread waiting on a busy core then costs milliseconds per step.
        """
        x1 = self._x1.index_select(0, rows)
        x1t = x1.t().contiguous()
        aux = self._aux.index_select(0, rows).t().contiguous()
        weights = ([None] * len(counts) if self.weight is None
                   else self.weight.index_select(0, rows).split(counts))
        parts = (
            x1[:, : self.n_features].split(counts), x1t.split(counts, dim=1),
            aux[0].split(counts), aux[1].split(counts), aux[2].split(counts), weights,
        )
        return [Batch(*columns) for columns in zip(*parts, strict=True)]

    def padded(self, positions: torch.Tensor) -> Batch:
        """One step's batch at a fixed width: positions past the table are padding rows (the
        last row, weight 0), so every step has the same shapes (``worker.fixed_width``)."""
        weight = (positions < self.n_rows).to(self._x1.dtype)
        rows = positions.clamp_max(self.n_rows - 1)
        if self.weight is not None:
            weight = weight * self.weight.index_select(0, rows)
        x1 = self._x1.index_select(0, rows)
        aux = self._aux.index_select(0, rows).t().contiguous()
        return Batch(x1[:, : self.n_features], x1.t().contiguous(), aux[0], aux[1], aux[2], weight)


def per_sample_gradients(network: nn.Module, out: torch.Tensor) -> PerSampleGradients:
    """The fastest exact per-sample gradient rule for ``network``, writing into ``out``: its
    family's closed form where it has one (``app.families``), else ``torch.func``'s."""
    family = family_of_network(network)
    rule = None if family is None else family.per_sample_gradients(network, out)
    return rule if rule is not None else FunctionalGradients(network, out)


def bind_gradients(network: nn.Module, flat: torch.Tensor) -> None:
    """Make every parameter's ``.grad`` a contiguous view of ``flat`` (fused SGD needs that)."""
    offset = 0
    for p in network.parameters():
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()


class DPSGD:
    """One job's vectorised DP-SGD over an in-memory table (on the table's device).

    Args:
        network: a family's network (``Family.network``; any other module, or a family
            without a closed form, falls back to ``torch.func``).
        optimizer: steps ``network``'s parameters; it only ever sees the noisy gradient.
        x: scaled features, (n, d) float32. y: labels 0/1, (n,).
        batch_size: the expected batch size the job asked for; q = 1 / ceil(n / batch_size).
        noise_multiplier: sigma; 0 means non-private (same sampling, no clipping, no noise).
        max_grad_norm: clip norm C, > 0.
        sampling_rng, noise_rng: secret generators on ``x``'s device (``secret_generator``).
    """

    def __init__(
        self,
        network: nn.Module,
        optimizer: torch.optim.Optimizer,
        x: torch.Tensor,
        y: torch.Tensor,
        *,
        batch_size: int,
        noise_multiplier: float,
        max_grad_norm: float,
        sampling_rng: torch.Generator,
        noise_rng: torch.Generator,
        fixed_width: bool | None = None,
        planned_rows: int | None = None,
    ) -> None:
        """``planned_rows``: the public row count the ledger's plan was charged for (default:
        the table's). A release that left patients out reads fewer rows: the table is padded
        to the planned size with rows of weight 0 (``Table``), so the sample rate, the
        expected batch and the work of every step are the planned ones, whoever was left
        out."""
        self.table = Table(x, y, planned_rows)
        n_rows = self.table.n_rows
        self.sample_rate, self.steps_per_epoch = poisson_plan(n_rows, batch_size)
        # Opacus divides by int(len(dataset) * q); the floor of 1 guards its 0.999... case.
        self.expected_batch_size = max(1, int(n_rows * self.sample_rate))
        self.noise_multiplier = noise_multiplier
        self.private = noise_multiplier > 0
        self.optimizer = optimizer
        self._clip = torch.tensor(max_grad_norm, dtype=x.dtype, device=x.device)
        self._noise_std = noise_multiplier * max_grad_norm
        self._noise_rng = noise_rng
        self.sampler = PoissonSampler(self.table.n_rows, self.sample_rate, sampling_rng)
        self._everyone: Batch | None = None  # the full-table batch when q = 1
        self._flat = torch.zeros(
            sum(p.numel() for p in network.parameters()), dtype=x.dtype, device=x.device
        )
        bind_gradients(network, self._flat)
        self._grads = per_sample_gradients(network, self._flat)
        self.accountant = PRVAccountant()
        if self.private:
            optimizer.register_step_post_hook(self._account)
        on_gpu = x.device.type == "cuda"
        self._fixed = (FixedWidthSteps(self, capture=on_gpu)
                       if (on_gpu if fixed_width is None else fixed_width) else None)

    @property
    def flat(self) -> torch.Tensor:
        """The flat gradient buffer the parameters' ``.grad`` views point into."""
        return self._flat

    def _account(self, *_: object) -> None:
        self.accountant.step(noise_multiplier=self.noise_multiplier, sample_rate=self.sample_rate)

    @property
    def history(self) -> list[tuple[float, float, int]]:
        """The accountant's (sigma, q, steps) history, as Opacus' ``accountant.history``."""
        return list(self.accountant.history)

    def run_epoch(self) -> None:
        """``steps_per_epoch`` optimizer steps, each on a fresh Poisson batch."""
        self.run_steps(self.steps_per_epoch)

    @torch.no_grad()
    def run_steps(self, steps: int) -> None:
        """``steps`` optimizer steps, each on a fresh Poisson batch (a federation's round)."""
        if self._fixed is not None:
            self._fixed.run_epoch(steps)
            return
        if self.sample_rate >= 1.0:
            # Poisson sampling at rate 1 includes every record in every step: the batch is the
            # whole table, gathered once (drawing and gathering 5,600 rows per step cost 10x
            # the step itself).
            if self._everyone is None:
                rows = torch.arange(self.table.n_rows, device=self._flat.device)
                (self._everyone,) = self.table.batches(rows, [self.table.n_rows])
            for noise_row in self.draw_noise(steps):
                self.privatise(self._everyone, noise_row)
                self.optimizer.step()
            return
        for positions in self.sampler.position_blocks(steps):
            self.eager_block(positions, self.draw_noise(len(positions)))

    def eager_block(self, positions: torch.Tensor, noise: list[torch.Tensor | None]) -> None:
        """The steps of one position block, each batch exactly its chosen rows."""
        rows, counts = self.sampler.chosen(positions)
        for batch, noise_row in zip(self.table.batches(rows, counts), noise, strict=True):
            self.privatise(batch, noise_row)
            self.optimizer.step()

    @torch.no_grad()
    def gradient(self, rows: torch.Tensor, *, noise: bool = True) -> torch.Tensor:
        """What the optimizer would see for a batch of ``rows`` (a copy; for tests).

        ``noise=False`` gives the clipped sum over the expected batch size without the noise,
        which is what Opacus' optimizer holds after clipping with a zero noise multiplier.
        """
        (batch,) = self.table.batches(rows, [len(rows)])
        (noise_row,) = self.draw_noise(1) if noise else [None]
        self.privatise(batch, noise_row)
        return self._flat.clone()

    def draw_noise(self, steps: int) -> list[torch.Tensor | None]:
        """Noise for ``steps`` steps, already scaled by sigma C / expected batch size."""
        if not self.private:
            return [None] * steps
        noise = torch.randn((steps, len(self._flat)), generator=self._noise_rng,
                            dtype=self._flat.dtype, device=self._flat.device)
        return list(noise.mul_(self._noise_std / self.expected_batch_size).unbind(0))

    def privatise(self, batch: Batch, noise: torch.Tensor | None) -> None:
        # An empty batch gives a zero sum and still takes the noisy step: skipping it would
        # reveal that the batch was empty.
        self._grads.accumulate(batch, self._clip if self.private else None)
        if noise is None:
            self._flat.div_(self.expected_batch_size)
        else:  # (clipped sum + N(0, (sigma C)^2)) / expected batch size, in one operation
            torch.add(noise, self._flat, alpha=1.0 / self.expected_batch_size, out=self._flat)

    def release(self) -> None:
        """Drop the gradient views so the trained network holds no reference to them."""
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad = None
