"""A release that left patients out trains on the part padded to its public size: padding rows
weigh nothing, and every step samples and computes over as many rows as with nobody left out,
so neither the model's arithmetic nor the run's work depends on how many were."""

import math

import numpy as np
import pytest
import torch

from app.datasets import synthetic
from app.features import scale
from app.registry.network import build_network
from worker.dpsgd import DPSGD, secret_generator
from worker.training import TrainingSpec, padded_rows, train

CPU = torch.device("cpu")


def _tensors(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    table = synthetic.generate(n, 11)
    return (torch.as_tensor(scale(table.x), dtype=torch.float32),
            torch.as_tensor(table.y, dtype=torch.float32))


def _engine(x: torch.Tensor, y: torch.Tensor, planned: int | None, *, kind: str = "logistic",
            batch_size: int = 32) -> DPSGD:
    torch.manual_seed(0)  # the same initial weights for every engine of a test
    network = build_network(kind, 8)
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    return DPSGD(network, optimizer, x, y, batch_size=batch_size, noise_multiplier=1.0,
                 max_grad_norm=1.0, sampling_rng=secret_generator(CPU),
                 noise_rng=secret_generator(CPU), planned_rows=planned)


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_padding_rows_add_nothing_to_the_clipped_sum(kind: str) -> None:
    x, y = _tensors(120)
    padded = _engine(x[:90], y[:90], 120, kind=kind)
    plain = _engine(x[:90], y[:90], None, kind=kind)
    everything = torch.arange(120)
    assert padded.table.n_rows == 120
    summed = padded.gradient(everything, noise=False) * padded.expected_batch_size
    assert torch.allclose(summed, plain.gradient(everything[:90], noise=False)
                          * plain.expected_batch_size, atol=1e-5)


def test_the_sampler_and_batch_follow_the_public_size_whoever_is_left_out() -> None:
    x, y = _tensors(400)
    engines = [_engine(x[:read], y[:read], 400) for read in (400, 360, 200)]
    assert {e.sampler.n_rows for e in engines} == {400}
    assert {e.sample_rate for e in engines} == {1 / math.ceil(400 / 32)}
    assert {e.expected_batch_size for e in engines} == {int(400 / math.ceil(400 / 32))}
    sizes = [sum(len(rows) for rows, _ in [e.sampler.chosen(p) for p in
                                           e.sampler.position_blocks(200)]) for e in engines]
    mean = 200 * 400 / math.ceil(400 / 32)
    assert all(abs(s - mean) < 6 * math.sqrt(mean) for s in sizes), sizes


def test_a_table_with_nobody_left_out_trains_to_the_same_weights() -> None:
    """A weight of one changes no figure: with the same secret draws, padding to a public size
    equal to the rows read gives bit-identical steps to no public size at all."""
    x, y = _tensors(300)
    weighted, plain = _engine(x, y, 300), _engine(x, y, None)
    rows = torch.arange(0, 300, 3)
    assert torch.equal(weighted.gradient(rows, noise=False), plain.gradient(rows, noise=False))


def test_opacus_reads_the_padded_rows_with_zero_weight() -> None:
    x, y = _tensors(50)
    rows = padded_rows(x, y, 80)
    assert len(rows) == 80
    x_all, y_all, weight = rows.tensors
    assert torch.equal(weight, torch.cat([torch.ones(50), torch.zeros(30)]))
    assert torch.equal(x_all[50:], torch.zeros(30, x.shape[1])) and not y_all[50:].any()
    assert len(padded_rows(x, y, None)) == 50 and len(padded_rows(x, y, 40)) == 50


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("engine", ["vectorised", "opacus"])
def test_training_with_patients_left_out_runs_the_planned_steps(engine: str) -> None:
    table = synthetic.generate(600, 5)
    planned, read = 600, 450
    batches = math.ceil(planned / 100)
    spec = TrainingSpec(kind="logistic", hidden_units=8, epochs=2, batch_size=100,
                        learning_rate=0.5, momentum=0.9, max_grad_norm=1.0,
                        noise_multiplier=1.0, sample_rate=1 / batches, steps=2 * batches,
                        delta=1e-5, seed=3, engine=engine)
    result = train(table.x[:read], table.y[:read], spec, device=CPU, planned_rows=planned)
    assert result.history and all(q == pytest.approx(1 / batches) for _, q, _ in result.history)
    assert sum(steps for _, _, steps in result.history) == 2 * batches
    weights = np.concatenate([p.detach().numpy().ravel() for p in result.network.parameters()])
    assert np.isfinite(weights).all()
