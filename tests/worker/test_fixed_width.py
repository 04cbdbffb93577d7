"""Fixed-width DP-SGD steps (the GPU's CUDA-graph path) are the eager engine's steps: padding rows
add nothing, the updates and the accountant's history are equal, and the optimizer's hooks run
once per step. On the CPU the same fixed-width step runs uncaptured; the CUDA tests run the graph.
"""

import pytest
import torch
from torch import nn

from app.datasets import synthetic
from app.features import scale
from app.registry.network import build_network
from worker.dpsgd import DPSGD, PoissonSampler
from worker.fixed_width import FixedWidthSteps, hooks_held
from worker.optimizer import make_optimizer

CPU = torch.device("cpu")
DEVICES = [CPU] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
NETWORKS = {
    "logistic": lambda: build_network("logistic"),
    "mlp": lambda: build_network("mlp", 8),
    "relu-mlp (torch.func)": lambda: nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 1)),
}


def _tensors(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    table = synthetic.generate(n, 5)
    x = torch.as_tensor(scale(table.x), dtype=torch.float32, device=device)
    return x, torch.as_tensor(table.y, dtype=torch.float32, device=device)


def _engine(network: nn.Module, x: torch.Tensor, y: torch.Tensor, *, optimizer: str = "sgd",
            fixed_width: bool, seed: int = 0, batch_size: int = 64) -> DPSGD:
    network = network.to(x.device)
    opt = make_optimizer(network, name=optimizer, learning_rate=0.1, momentum=0.9,
                         noise_std=0.02, fused=True)
    return DPSGD(
        network, opt, x, y, batch_size=batch_size, noise_multiplier=1.0, max_grad_norm=1.0,
        sampling_rng=torch.Generator(device=x.device).manual_seed(seed),
        noise_rng=torch.Generator(device=x.device).manual_seed(seed + 1),
        fixed_width=fixed_width,
    )


def _weights(engine: DPSGD) -> torch.Tensor:
    params = [p for g in engine.optimizer.param_groups for p in g["params"]]
    return torch.cat([p.detach().reshape(-1) for p in params]).cpu()


@torch.no_grad()
@pytest.mark.parametrize("name", list(NETWORKS))
def test_padding_rows_add_nothing_to_the_clipped_sum(name: str) -> None:
    x, y = _tensors(300, CPU)
    torch.manual_seed(0)
    engine = _engine(NETWORKS[name](), x, y, fixed_width=False)
    sampler = PoissonSampler(300, 0.1, torch.Generator().manual_seed(3))
    (positions,) = sampler.position_blocks(1)
    positions = positions[0]
    assert bool((positions >= 300).any()), "the draw needs padding rows for this test"
    rows, counts = sampler.chosen(positions[None])
    (batch,) = engine.table.batches(rows, counts)
    engine.privatise(batch, None)
    eager = engine.flat.clone()
    engine.privatise(engine.table.padded(positions), None)
    torch.testing.assert_close(engine.flat, eager, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.type)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("kind", ["logistic", "mlp"])
@pytest.mark.parametrize("batch_size", [64, 10_000])  # mini-batch, and the whole table (q = 1)
def test_fixed_width_training_equals_eager_training(
    device: torch.device, optimizer: str, kind: str, batch_size: int
) -> None:
    x, y = _tensors(900, device)
    engines = []
    for fixed_width in (False, True):
        torch.manual_seed(1)  # the same initial weights
        engine = _engine(build_network(kind, 8), x, y, optimizer=optimizer,
                         fixed_width=fixed_width, batch_size=batch_size)
        for _ in range(3):
            engine.run_epoch()
        engines.append(engine)
    eager, fixed = engines
    assert fixed.history == eager.history == [(1.0, eager.sample_rate, 3 * eager.steps_per_epoch)]
    torch.testing.assert_close(_weights(fixed), _weights(eager), rtol=1e-4, atol=1e-5)


def test_a_block_needing_more_draws_than_the_width_runs_eagerly() -> None:
    x, y = _tensors(400, CPU)
    engines = []
    for fixed_width in (False, True):
        torch.manual_seed(2)
        engine = _engine(build_network("logistic"), x, y, fixed_width=fixed_width)
        # Few draws per step: every block refills, so its width exceeds the fixed one.
        engine.sampler = PoissonSampler(400, engine.sample_rate,
                                        torch.Generator().manual_seed(7), draws_per_step=8)
        engine._fixed = FixedWidthSteps(engine, capture=False) if fixed_width else None
        engine.run_epoch()
        engines.append(engine)
    eager, fixed = engines
    assert fixed._fixed is not None and fixed._fixed.eager_blocks > 0
    torch.testing.assert_close(_weights(fixed), _weights(eager), rtol=1e-4, atol=1e-5)


def test_hooks_are_held_during_a_step_and_restored_after() -> None:
    network = build_network("logistic")
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    calls: list[str] = []
    optimizer.register_step_post_hook(lambda *_: calls.append("hook"))
    with hooks_held(optimizer) as hooks:
        optimizer.step()
        assert calls == []
        assert len(hooks) == 1
    optimizer.step()
    assert calls == ["hook"]


def test_tail_averaging_and_the_accountant_see_every_fixed_width_step() -> None:
    x, y = _tensors(500, CPU)
    engine = _engine(build_network("logistic"), x, y, fixed_width=True)
    seen: list[int] = []
    engine.optimizer.register_step_post_hook(lambda *_: seen.append(1))
    engine.run_epoch()
    engine.run_epoch()
    assert len(seen) == 2 * engine.steps_per_epoch
    assert engine.history == [(1.0, engine.sample_rate, 2 * engine.steps_per_epoch)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_capture_leaves_the_weights_and_the_optimizer_at_a_fresh_start(optimizer: str) -> None:
    x, y = _tensors(700, torch.device("cuda"))
    torch.manual_seed(4)
    engine = _engine(build_network("mlp", 8), x, y, optimizer=optimizer, fixed_width=True)
    before = _weights(engine)
    assert engine._fixed is not None and engine._fixed.capture
    with torch.no_grad():  # as in ``DPSGD.run_epoch``
        engine._fixed._prepare()
    torch.testing.assert_close(_weights(engine), before, rtol=0, atol=0)
    for state in engine.optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                assert not bool(value.any())
    assert engine.history == []
