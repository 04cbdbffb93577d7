"""The vectorised DP-SGD engine is Opacus' mechanism: same clipped sums, noise, sampling law and
accounting, with secret sampling and noise and seeded initial weights."""

import copy
import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch
from opacus import GradSampleModule, PrivacyEngine
from opacus.optimizers import DPOptimizer
from scipy import stats
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from app.datasets import synthetic
from app.features import scale
from app.registry.network import build_network
from worker.dpsgd import DPSGD, PoissonSampler, _FunctionalGradients, secret_generator
from worker.training import TrainingSpec, predict_proba, train

CPU = torch.device("cpu")


def _tensors(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    table = synthetic.generate(n, seed)
    x = torch.as_tensor(scale(table.x), dtype=torch.float32)
    return x, torch.as_tensor(table.y, dtype=torch.float32)


def _engine(network: nn.Module, x: torch.Tensor, y: torch.Tensor, **kwargs: float) -> DPSGD:
    lr = float(kwargs.pop("lr", 0.1))
    momentum = float(kwargs.pop("momentum", 0.0))
    options = dict(batch_size=64, noise_multiplier=1.0, max_grad_norm=1.0) | kwargs
    optimizer = torch.optim.SGD(network.parameters(), lr=lr, momentum=momentum)
    return DPSGD(network, optimizer, x, y, **options,  # type: ignore[arg-type]
                 sampling_rng=secret_generator(x.device), noise_rng=secret_generator(x.device))


def _spec(n_train: int, **overrides: object) -> TrainingSpec:
    batch = int(overrides.pop("batch_size", 256))  # type: ignore[call-overload]
    epochs = int(overrides.pop("epochs", 3))  # type: ignore[call-overload]
    batches = math.ceil(n_train / batch)
    values: dict[str, object] = dict(
        kind="logistic", hidden_units=8, epochs=epochs, batch_size=batch, learning_rate=0.5,
        momentum=0.9, max_grad_norm=1.0, noise_multiplier=1.0, sample_rate=1 / batches,
        steps=epochs * int(batches), delta=1e-5, seed=3,
    )
    return TrainingSpec(**(values | overrides))  # type: ignore[arg-type]


def _relu_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 1))


NETWORKS = {
    "logistic": lambda: build_network("logistic"),
    "mlp": lambda: build_network("mlp", 8),
    "relu-mlp (torch.func fallback)": _relu_mlp,
}


# (a) per-sample clipped sums equal Opacus'
@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("name", list(NETWORKS))
def test_clipped_gradient_equals_opacus(name: str) -> None:
    x, y = _tensors(400, 1)
    torch.manual_seed(0)
    network = NETWORKS[name]()
    rows = torch.arange(0, 400, 3)
    reference = GradSampleModule(copy.deepcopy(network))  # loss_reduction="mean", as make_private
    nn.BCEWithLogitsLoss()(reference(x[rows]).squeeze(-1), y[rows]).backward()
    grad_samples = [p.grad_sample.reshape(len(rows), -1) for p in reference.parameters()]
    norms = torch.cat(grad_samples, dim=1).norm(dim=1)
    clip = float(norms.median())  # about half the samples are clipped
    engine = _engine(network, x, y, max_grad_norm=clip)
    optimizer = DPOptimizer(
        torch.optim.SGD(reference.parameters(), lr=0.1), noise_multiplier=0.0,
        max_grad_norm=clip, expected_batch_size=engine.expected_batch_size,
    )
    optimizer.pre_step()  # clip, accumulate, add (zero) noise, divide by the expected batch
    expected = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    ours = engine.gradient(rows, noise=False)
    assert (norms > clip).any() and (norms < clip).any()
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_closed_forms_equal_torch_func_and_unclipped_sum_equals_autograd(kind: str) -> None:
    x, y = _tensors(300, 2)
    torch.manual_seed(1)
    network = build_network(kind, 8)
    rows = torch.arange(0, 300, 2)
    private = _engine(network, x, y, max_grad_norm=0.3)
    closed = private.gradient(rows, noise=False)
    functional = _FunctionalGradients(network, torch.empty_like(closed))
    (batch,) = private.table.batches(rows, [len(rows)])
    functional.accumulate(batch, torch.tensor(0.3))
    torch.testing.assert_close(closed, functional.out / private.expected_batch_size)

    public = _engine(network, x, y, noise_multiplier=0.0)
    plain = public.gradient(rows)  # no clipping, no noise
    network.zero_grad(set_to_none=True)
    loss = nn.BCEWithLogitsLoss(reduction="sum")(network(x[rows]).squeeze(-1), y[rows])
    loss.backward()
    autograd = torch.cat([p.grad.reshape(-1) for p in network.parameters()])
    torch.testing.assert_close(plain, autograd / public.expected_batch_size)


def test_empty_batch_gives_a_noise_only_gradient() -> None:
    x, y = _tensors(100, 3)
    engine = _engine(build_network("logistic"), x, y)
    empty = torch.empty(0, dtype=torch.int64)
    assert torch.equal(engine.gradient(empty, noise=False), torch.zeros(7))
    noisy = engine.gradient(empty)
    assert torch.isfinite(noisy).all() and (noisy != 0).all()


# (b) the noise of the update has std sigma C / (q n)
def test_update_noise_std_is_sigma_c_over_expected_batch() -> None:
    x, y = _tensors(50, 4)
    sigma, clip = 1.3, 0.7
    network = build_network("logistic")
    # q = 1: every step sees all rows, so the update minus the clipped mean is pure noise.
    engine = _engine(network, x, y, batch_size=50, noise_multiplier=sigma, max_grad_norm=clip,
                     lr=1.0, momentum=0.0)
    assert (engine.sample_rate, engine.steps_per_epoch, engine.expected_batch_size) == (1, 1, 50)
    every_row = torch.arange(50)
    noise = []
    for _ in range(2000):
        before = torch.cat([p.detach().reshape(-1) for p in network.parameters()])
        signal = engine.gradient(every_row, noise=False)
        engine.run_epoch()  # one optimizer step, lr 1, no momentum: after = before - gradient
        after = torch.cat([p.detach().reshape(-1) for p in network.parameters()])
        noise.append(before - after - signal)
    draws = torch.stack(noise).double()
    expected = sigma * clip / 50
    assert abs(float(draws.std()) / expected - 1) < 0.03
    assert abs(float(draws.mean())) < 4 * expected / math.sqrt(draws.numel())
    per_coordinate = draws.std(dim=0) / expected
    assert ((per_coordinate - 1).abs() < 0.1).all(), per_coordinate


# (c) Poisson sampling: each row independently with probability q
@pytest.mark.parametrize("draws_per_step", [None, 2])  # 2: every step needs many refills
def test_poisson_sampling_matches_bernoulli(draws_per_step: int | None) -> None:
    n, q, steps = 40, 1 / 8, 20000
    sampler = PoissonSampler(n, q, secret_generator(CPU), draws_per_step=draws_per_step)
    mask = torch.zeros(steps, n, dtype=torch.bool)
    for t, rows in enumerate(sampler.batches(steps)):
        assert rows.dtype == torch.int64
        assert (rows[1:] > rows[:-1]).all() and (rows >= 0).all() and (rows < n).all()
        mask[t, rows] = True
    frequency = mask.double().mean(dim=0)
    sd = math.sqrt(q * (1 - q) / steps)
    assert ((frequency - q).abs() < 5 * sd).all(), frequency
    pairs = (mask[:, 1:] & mask[:, :-1]).double().mean()  # neighbours: gaps are independent
    assert abs(float(pairs) - q * q) < 5 * math.sqrt(q * q / (steps * (n - 1)))
    sizes = mask.sum(dim=1).numpy()
    observed = np.bincount(sizes, minlength=n + 1)
    expected = stats.binom.pmf(np.arange(n + 1), n, q) * steps
    keep = expected >= 5
    observed_pooled = np.append(observed[keep], observed[~keep].sum())
    expected_pooled = np.append(expected[keep], expected[~keep].sum())
    assert stats.chisquare(observed_pooled, expected_pooled).pvalue > 1e-4


def test_poisson_sampling_costs_the_expected_batch_not_the_table() -> None:
    n, batch = 1_000_000, 500
    sampler = PoissonSampler(n, 1 / math.ceil(n / batch), secret_generator(CPU))
    assert sampler.draws_per_step < 2 * batch  # O(q n) uniform draws per step, not O(n)
    sizes = np.array([len(rows) for rows in sampler.batches(1000)])
    assert abs(sizes.mean() - batch) < 5 * math.sqrt(batch / 1000)
    assert 0.8 < sizes.var() / batch < 1.2  # Binomial(n, q): variance n q (1 - q)


def test_sample_rate_one_takes_every_row() -> None:
    sampler = PoissonSampler(30, 1.0, secret_generator(CPU))
    assert all(torch.equal(rows, torch.arange(30)) for rows in sampler.batches(5))


# (d) steps, sample rate, expected batch and history as planned and as Opacus records them
def test_sampling_plan_equals_opacus_make_private() -> None:
    x, y = _tensors(1003, 5)
    network = build_network("logistic")
    engine = _engine(copy.deepcopy(network), x, y, batch_size=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, optimizer, loader = PrivacyEngine(accountant="prv").make_private(
            module=network, optimizer=torch.optim.SGD(network.parameters(), lr=0.1),
            data_loader=DataLoader(TensorDataset(x, y), batch_size=100), noise_multiplier=1.0,
            max_grad_norm=1.0, poisson_sampling=True,
        )
    assert engine.sample_rate == loader.sample_rate
    assert engine.steps_per_epoch == len(loader)
    assert engine.expected_batch_size == optimizer.expected_batch_size


def test_history_equals_the_plan_and_opacus_history() -> None:
    x, y = _tensors(1000, 6)
    spec = _spec(1000, batch_size=100, epochs=3, noise_multiplier=1.1)
    seen: list[list[tuple[float, float, int]]] = []
    ours = train(x.numpy(), y.numpy(), spec, device=CPU,
                 on_epoch=lambda _e, history: seen.append(history) is None)
    theirs = train(x.numpy(), y.numpy(), dataclasses.replace(spec, engine="opacus"), device=CPU)
    assert ours.history == theirs.history == [(1.1, spec.sample_rate, spec.steps)]
    assert seen == [[(1.1, 0.1, 10)], [(1.1, 0.1, 20)], [(1.1, 0.1, 30)]]


@pytest.mark.parametrize("change", [{"steps": 31}, {"sample_rate": 0.11}])
def test_a_spec_that_differs_from_the_plan_is_refused(change: dict[str, float]) -> None:
    x, y = _tensors(1000, 6)
    spec = dataclasses.replace(_spec(1000, batch_size=100, epochs=3), **change)
    with pytest.raises(RuntimeError, match="planned"):
        train(x.numpy(), y.numpy(), spec, device=CPU)


def test_unknown_engine_is_refused() -> None:
    x, y = _tensors(100, 6)
    with pytest.raises(ValueError, match="engine"):
        train(x.numpy(), y.numpy(), _spec(100, engine="jax"), device=CPU)


# (e) it learns
@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_vectorised_dp_training_learns(kind: str) -> None:
    table = synthetic.generate(12000, 7)
    train_rows, held_out = synthetic.split_indices(12000, 7)
    spec = _spec(len(train_rows), kind=kind, epochs=10, noise_multiplier=1.0)
    result = train(table.x[train_rows], table.y[train_rows], spec, device=CPU)
    auc = roc_auc_score(table.y[held_out], predict_proba(result.network, table.x[held_out]))
    assert auc > 0.75, auc  # Bayes-optimal is about 0.845; these runs give about 0.81
    assert all(p.grad is None for p in result.network.parameters())


# (f) secret sampling and noise, seeded initial weights
def _weights(result_network: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in result_network.parameters()])


def test_initial_weights_are_seeded_but_sampling_and_noise_are_not() -> None:
    x, y = _tensors(500, 8)
    x_raw, y_raw = x.numpy(), y.numpy()
    frozen = _spec(500, batch_size=50, learning_rate=0.0)  # lr 0: the result is the start
    assert torch.equal(_weights(train(x_raw, y_raw, frozen, device=CPU).network),
                       _weights(train(x_raw, y_raw, frozen, device=CPU).network))
    torch.manual_seed(frozen.seed)
    seeded = _weights(build_network("logistic"))
    assert torch.equal(_weights(train(x_raw, y_raw, frozen, device=CPU).network), seeded)

    sampling_only = _spec(500, batch_size=50, noise_multiplier=0.0)  # q = 0.1, no noise
    first = _weights(train(x_raw, y_raw, sampling_only, device=CPU).network)
    second = _weights(train(x_raw, y_raw, sampling_only, device=CPU).network)
    assert not torch.allclose(first, second), "the same seed replayed the same batches"

    noise_only = _spec(500, batch_size=500)  # q = 1: every batch is the whole table
    first = _weights(train(x_raw, y_raw, noise_only, device=CPU).network)
    second = _weights(train(x_raw, y_raw, noise_only, device=CPU).network)
    assert not torch.allclose(first, second), "the same seed replayed the same noise"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_engine_runs_on_the_device_and_accounts_as_planned() -> None:
    cuda = torch.device("cuda")
    sampler = PoissonSampler(40, 1 / 8, secret_generator(cuda))
    sizes = torch.stack([torch.tensor(len(rows)) for rows in sampler.batches(4000)]).double()
    assert abs(float(sizes.mean()) - 5) < 0.25
    table = synthetic.generate(6000, 9)
    train_rows, held_out = synthetic.split_indices(6000, 9)
    for kind in ("logistic", "mlp"):
        spec = _spec(len(train_rows), kind=kind, epochs=5)
        result = train(table.x[train_rows], table.y[train_rows], spec, device=cuda)
        assert result.history == [(1.0, spec.sample_rate, spec.steps)]
        auc = roc_auc_score(table.y[held_out], predict_proba(result.network, table.x[held_out]))
        assert auc > 0.65, auc
