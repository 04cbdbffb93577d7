"""Real DP training on small data (the vectorised engine, and Opacus as the reference): it
learns, accounts as planned, and keeps noise secret."""

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from app.datasets import synthetic
from worker.training import TrainingSpec, epsilon_of, predict_proba, train


def _spec(n_train: int, **overrides: float | str) -> TrainingSpec:
    batch = int(overrides.pop("batch_size", 256))
    epochs = int(overrides.pop("epochs", 5))
    batches = math.ceil(n_train / batch)
    values = dict(
        kind="logistic", hidden_units=8, epochs=epochs, batch_size=batch, learning_rate=0.5,
        momentum=0.9, max_grad_norm=1.0, noise_multiplier=1.0, sample_rate=1 / batches,
        steps=epochs * batches, delta=1e-5, seed=3,
    )
    values.update(overrides)
    return TrainingSpec(**values)  # type: ignore[arg-type]


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    table = synthetic.generate(n, seed)
    return table.x, table.y


@pytest.mark.parametrize("engine", ["vectorised", "opacus"])
@pytest.mark.parametrize("kind", ["logistic", "mlp"])
def test_dp_training_learns_and_accounts_as_planned(kind: str, engine: str) -> None:
    x, y = _data(4000, 1)
    spec = _spec(len(x), kind=kind, epochs=8, engine=engine)
    seen: list[int] = []
    result = train(x, y, spec, device=torch.device("cpu"),
                   on_epoch=lambda epoch, _history: seen.append(epoch) is None)
    assert seen == list(range(1, 9))
    assert result.history == [(spec.noise_multiplier, spec.sample_rate, spec.steps)]
    x_test, y_test = _data(20000, 2)
    auc = roc_auc_score(y_test, predict_proba(result.network, x_test))
    assert auc > 0.75, auc
    eps_prv, eps_rdp = epsilon_of(result.history, spec.delta)
    assert 0 < eps_prv <= eps_rdp


def test_noise_is_not_reproducible_from_the_public_seed() -> None:
    x, y = _data(1000, 4)
    spec = _spec(len(x), epochs=1)
    first = train(x, y, spec, device=torch.device("cpu")).network
    second = train(x, y, spec, device=torch.device("cpu")).network
    w1 = first[0].weight.detach()
    w2 = second[0].weight.detach()
    assert not torch.allclose(w1, w2), "same seed gave the same noisy weights"


def test_empty_poisson_batches_still_take_a_noisy_step() -> None:
    x, y = _data(30, 5)
    spec = _spec(len(x), batch_size=1, epochs=2)  # q = 1/30: about a third of batches empty
    result = train(x, y, spec, device=torch.device("cpu"))
    assert result.history == [(1.0, spec.sample_rate, spec.steps)]
    for p in result.network.parameters():
        assert torch.isfinite(p).all()


def test_callback_can_stop_training_early() -> None:
    x, y = _data(1000, 6)
    spec = _spec(len(x), epochs=5)
    result = train(x, y, spec, device=torch.device("cpu"), on_epoch=lambda e, _h: e < 2)
    assert result.epochs_completed == 2 and result.stopped_early


def test_non_private_training_has_no_accountant_history() -> None:
    x, y = _data(1000, 7)
    result = train(x, y, _spec(len(x), epochs=2, noise_multiplier=0.0),
                   device=torch.device("cpu"))
    assert result.history == []


def test_tail_average_is_the_mean_of_the_last_iterates() -> None:
    from torch import nn

    from worker.training import TailAverage

    layer = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=1.0)
    average = TailAverage(optimizer, first_step=3)  # steps 3 and 4 are averaged
    seen = []
    for step in range(1, 5):
        for p in layer.parameters():
            p.grad = torch.full_like(p, float(step))
        optimizer.step()
        seen.append([p.detach().clone() for p in layer.parameters()])
    average.apply_to(layer)
    for i, p in enumerate(layer.parameters()):
        torch.testing.assert_close(p, (seen[2][i] + seen[3][i]) / 2)


@pytest.mark.parametrize(("fraction", "first"), [(0.0, 101), (0.5, 51), (0.25, 76), (0.999, 1)])
def test_first_averaged_step(fraction: float, first: int) -> None:
    from worker.training import first_averaged_step

    spec = _spec(1000, batch_size=1000, epochs=100, tail_average=fraction)
    assert spec.steps == 100
    assert first_averaged_step(spec) == first
