"""The optimizer the noisy gradients drive (worker/optimizer.py): Adam's epsilon is the public
noise level, both engines drive it alike, and it converges where momentum SGD stalls (a rare
outcome on features that use a small part of their declared range)."""

import dataclasses

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from app.datasets import synthetic
from app.datasets.schema.dataset_schema import DatasetSchema
from app.datasets.schema.encoding import encoder_for
from app.registry.network import build_network
from worker import optimizer as optimizers
from worker.training import TrainingSpec, make_optimizer, predict_log_odds, train

CPU = torch.device("cpu")


def _spec(n_train: int, **overrides: object) -> TrainingSpec:
    values: dict[str, object] = dict(
        kind="logistic", hidden_units=8, epochs=100, batch_size=n_train, learning_rate=0.3,
        momentum=0.9, max_grad_norm=2.0, noise_multiplier=0.0, sample_rate=1.0, steps=100,
        delta=1e-5, seed=0, optimizer="adam",
    )
    return TrainingSpec(**(values | overrides))  # type: ignore[arg-type]


def test_adams_epsilon_is_three_noise_stds_of_the_gradient_it_sees() -> None:
    spec = _spec(5000, noise_multiplier=40.0, max_grad_norm=0.5, batch_size=1000,
                 sample_rate=0.2, epochs=1, steps=5)
    adam = make_optimizer(build_network("logistic"), spec, n_train=5000)
    assert isinstance(adam, torch.optim.Adam)
    (group,) = adam.param_groups
    # Noise on the mean gradient: sigma C over the expected batch int(q n) = 1000.
    assert group["eps"] == pytest.approx(optimizers.ADAM_NOISE_EPSILON * 40.0 * 0.5 / 1000)
    assert group["betas"] == (0.9, optimizers.ADAM_BETA2) and group["lr"] == 0.3
    non_private = make_optimizer(build_network("logistic"), _spec(5000), n_train=5000)
    assert non_private.param_groups[0]["eps"] == optimizers.NON_PRIVATE_EPSILON


def test_sgd_keeps_its_momentum_and_an_unknown_optimizer_is_refused() -> None:
    sgd = make_optimizer(build_network("logistic"), _spec(100, optimizer="sgd"), n_train=100)
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]["momentum"] == 0.9
    with pytest.raises(ValueError, match="optimizer"):
        make_optimizer(build_network("logistic"), _spec(100, optimizer="lbfgs"), n_train=100)


def _weights(network: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in network.parameters()])


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
def test_both_engines_drive_adam_alike() -> None:
    """Without noise both engines take the same full-batch steps: same Adam, same weights."""
    table = synthetic.generate(2000, 11)
    spec = _spec(2000, epochs=60, steps=60, tail_average=0.5)
    ours = train(table.x, table.y, spec, device=CPU).network
    theirs = train(table.x, table.y, dataclasses.replace(spec, engine="opacus"), device=CPU)
    torch.testing.assert_close(_weights(ours), _weights(theirs.network), atol=2e-4, rtol=1e-3)


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("engine", ["vectorised", "opacus"])
def test_dp_adam_accounts_as_planned(engine: str) -> None:
    table = synthetic.generate(3000, 12)
    spec = _spec(3000, batch_size=300, sample_rate=0.1, epochs=2, steps=20,
                 noise_multiplier=1.0, engine=engine)
    result = train(table.x, table.y, spec, device=CPU)
    assert result.history == [(1.0, 0.1, 20)]
    assert all(torch.isfinite(p).all() for p in result.network.parameters())


LABS = encoder_for(DatasetSchema.model_validate({
    "features": [{"name": f"lab_{i}", "kind": "numeric", "lower": -6, "upper": 6,
                  "reference": 0} for i in range(6)],
    "outcome": {"name": "event"}}))
"""Six lab z-scores declared in [-6, 6]: the data use a sixth of that range."""


def _mean_loss(logits: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.logaddexp(0, logits) - y * logits))


def test_adam_converges_where_momentum_sgd_stalls() -> None:
    """The proxy study's 'wide' table in small: a 1% outcome on lab z-scores, 300 noise-free
    full-batch steps, the non-private optimum as the reference. SGD at its default rate is
    still far from it; Adam is close."""
    rng = np.random.default_rng(13)
    x = rng.normal(0.0, 1.0, (20_000, 6))
    y = rng.binomial(1, 1 / (1 + np.exp(-(x @ [0.5, -0.4, 0.3, 0.2, 0.0, 0.0] - 5.0))))
    best = LogisticRegression(C=1e4, max_iter=10_000, tol=1e-10).fit(LABS.encode(x), y)
    optimum = _mean_loss(LABS.encode(x) @ best.coef_[0] + best.intercept_[0], y)
    excess = {}
    for name, lr in (("sgd", 0.5), ("adam", 0.3)):
        spec = _spec(len(y), epochs=300, steps=300, optimizer=name, learning_rate=lr,
                     tail_average=0.5)
        network = train(x, y.astype(float), spec, device=CPU, encoder=LABS).network
        excess[name] = _mean_loss(predict_log_odds(network, x, LABS), y) - optimum
    assert excess["adam"] < 0.1 * excess["sgd"], excess
    assert excess["adam"] < 1e-4, excess
