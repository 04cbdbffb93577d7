"""DP-SGD steps at one fixed batch width, replayed as a CUDA graph where the job runs on a GPU.

A Poisson batch's size changes every step, and a small step on a GPU costs its kernel launches
whatever its size, so launched eagerly a mini-batch job runs slower on the GPU than on 16 CPU
cores (bench/training_speed.py --small-batches). Here every step reads one fixed-width row of
sampled positions: those past the end of the table are padding rows with weight 0 (their
per-sample gradient is multiplied by zero, so the clipped sum is the eager engine's), which
gives every step the same shapes. The whole step (gather, per-sample gradients, clipping, noise,
the optimizer's update) is then captured once and replayed with one launch.

The mechanism is unchanged: the width is the sampler's first round of draws (mean + 6 sd), and
the rare block whose steps needed more draws runs eagerly, so the sampling law stays exact. The
optimizer's post-step hooks (the accountant, tail averaging) are Python: they are held out of the
capture and run after every replayed step, so the accountant records exactly the steps taken.
"""

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

from app.families.gradients import Batch
from worker.optimizer import restart

_WARM_UP_STEPS = 3  # eager iterations on a side stream before capture (torch's recipe)
PostHook = Callable[[torch.optim.Optimizer, tuple[Any, ...], dict[str, Any]], None]


class Engine(Protocol):
    """What the fixed-width steps use of the DP-SGD engine (``worker.dpsgd.DPSGD``)."""

    table: Any  # worker.dpsgd.Table
    sampler: Any  # worker.dpsgd.PoissonSampler
    sample_rate: float
    private: bool
    optimizer: torch.optim.Optimizer

    @property
    def flat(self) -> torch.Tensor: ...

    def privatise(self, batch: Batch, noise: torch.Tensor | None) -> None: ...

    def draw_noise(self, steps: int) -> list[torch.Tensor | None]: ...

    def eager_block(self, positions: torch.Tensor, noise: list[torch.Tensor | None]) -> None: ...


@contextmanager
def hooks_held(optimizer: torch.optim.Optimizer) -> Iterator[list[PostHook]]:
    """Run ``optimizer.step`` without its post-step hooks and yield them, to be called once
    per replayed step rather than once at capture."""
    held = optimizer._optimizer_step_post_hooks
    optimizer._optimizer_step_post_hooks = type(held)()
    try:
        yield list(held.values())
    finally:
        optimizer._optimizer_step_post_hooks = held


def make_capturable(optimizer: torch.optim.Optimizer) -> None:
    """Keep the optimizer's step counters on the device (Adam reads them inside the graph)."""
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True


class FixedWidthSteps:
    """An engine's steps at width ``sampler.draws_per_step`` (or the whole table when q = 1).

    ``capture`` records the step as a CUDA graph (needs the engine on a CUDA device); without
    it the same fixed-width step runs eagerly (the CPU tests of this path).
    """

    def __init__(self, engine: Engine, *, capture: bool) -> None:
        self.engine = engine
        table, device = engine.table, engine.flat.device
        self.full_table = engine.sample_rate >= 1.0
        self.width = table.n_rows if self.full_table else engine.sampler.draws_per_step
        # Every position past the table: the warm-up before capture reads no patient's row.
        self.positions = torch.full((self.width,), table.n_rows, dtype=torch.int64, device=device)
        # q = 1: the whole table, gathered once as the eager engine does; its weights are zero
        # during the warm-up and capture, the table's after (one, or zero for its padding).
        self.weight = torch.ones(table.n_rows, dtype=engine.flat.dtype, device=device)
        self._unmask()
        self.everyone = (table.padded(torch.arange(table.n_rows, device=device))
                         ._replace(weight=self.weight) if self.full_table else None)
        self.noise = torch.zeros_like(engine.flat)
        self.capture = capture
        self._replay: Callable[[], None] | None = None
        self.eager_blocks = 0  # blocks that needed more draws than the width (run eagerly)

    def _unmask(self) -> None:
        row_weight = self.engine.table.weight
        if row_weight is None:
            self.weight.fill_(1.0)
        else:
            self.weight.copy_(row_weight)

    def run_epoch(self, steps: int) -> None:
        """``steps`` optimizer steps, each on a fresh Poisson batch (the engine's law)."""
        replay = self._replay or self._prepare()
        if self.full_table:
            self._run(replay, [None] * steps, self.engine.draw_noise(steps))
            return
        for positions in self.engine.sampler.position_blocks(steps):
            noise = self.engine.draw_noise(len(positions))
            if positions.shape[1] != self.width:
                self.eager_blocks += 1
                self.engine.eager_block(positions, noise)
                continue
            self._run(replay, list(positions.unbind(0)), noise)

    def _run(self, replay: Callable[[], None], positions: list[torch.Tensor | None],
             noise: list[torch.Tensor | None]) -> None:
        optimizer = self.engine.optimizer
        with hooks_held(optimizer) as hooks:
            for row, noise_row in zip(positions, noise, strict=True):
                if row is not None:
                    self.positions.copy_(row)
                if noise_row is not None:
                    self.noise.copy_(noise_row)
                replay()
                for hook in hooks:
                    hook(optimizer, (), {})

    def _body(self) -> None:
        """One step on the static buffers: the whole of what the graph records."""
        everyone = self.everyone
        batch = everyone if everyone is not None else self.engine.table.padded(self.positions)
        self.engine.privatise(batch, self.noise if self.engine.private else None)
        self.engine.optimizer.step()

    def _prepare(self) -> Callable[[], None]:
        if self.capture:
            self._replay = self._captured()
        else:
            self._replay = self._body
        return self._replay

    def _captured(self) -> Callable[[], None]:
        """Warm up, capture ``_body`` as a CUDA graph, then restore the fresh start.

        The warm-up and capture steps run on padding only (every position past the table, zero
        noise): they read no patient's row, and the parameters and optimizer state they touched
        are put back to their values before training, so they are not steps of the mechanism.
        """
        optimizer = self.engine.optimizer
        make_capturable(optimizer)
        saved = [p.detach().clone() for group in optimizer.param_groups for p in group["params"]]
        self.positions.fill_(self.engine.table.n_rows)
        self.weight.zero_()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with warnings.catch_warnings(), hooks_held(optimizer):
            warnings.simplefilter("ignore")  # torch warns that a capturable step ran uncaptured
            with torch.cuda.stream(side):
                for _ in range(_WARM_UP_STEPS):
                    self._body()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self._body()
        self._restore(saved)
        self._unmask()
        return graph.replay

    def _restore(self, saved: list[torch.Tensor]) -> None:
        """Parameters back to their initial values, optimizer state back to a fresh start."""
        optimizer = self.engine.optimizer
        params = [p for group in optimizer.param_groups for p in group["params"]]
        with torch.no_grad():
            for param, value in zip(params, saved, strict=True):
                param.copy_(value)
        restart(optimizer)
