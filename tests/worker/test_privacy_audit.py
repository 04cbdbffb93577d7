"""The privacy audit's training parts, with real training on small tables."""


import numpy as np
import pytest
import torch

from app.datasets import synthetic
from app.privacy import accounting, noise
from worker.dpsgd import DPSGD
from worker.privacy_audit import audit, blackbox, membership, whitebox
from worker.privacy_audit.data import canary_rows, fresh_rows, spec_for_rows
from worker.training import TrainingSpec

CPU = torch.device("cpu")


def _table(n_rows: int = 2000, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    table = synthetic.generate(n_rows, seed)
    train, _ = synthetic.split_indices(n_rows, seed)
    return table.x[train], table.y[train]


def _spec(n_train: int, epsilon: float | None, *, batch_size: int | None = None,
          epochs: int = 500, kind: str = "logistic") -> TrainingSpec:
    """The service's default recipe (full batch unless ``batch_size``) at ``epsilon``."""
    batch = batch_size or n_train
    q, per_epoch = accounting.poisson_plan(n_train, batch)
    steps = epochs * per_epoch
    sigma = 0.0 if epsilon is None else noise.noise_for_target(
        target_epsilon=epsilon, delta=1e-5, sample_rate=q, steps=steps)
    return TrainingSpec(
        kind=kind, hidden_units=16, epochs=epochs, batch_size=batch, learning_rate=0.5,
        momentum=0.9, max_grad_norm=0.5, noise_multiplier=sigma, sample_rate=q, steps=steps,
        delta=1e-5, seed=0, tail_average=0.5,
    )


def test_white_box_canaries_measure_the_engines_noise_and_stay_below_the_accounting() -> None:
    x, y = _table()
    for spec in (_spec(len(x), 1.0), _spec(len(x), 3.0, batch_size=256, epochs=10)):
        found = whitebox.audit(x, y, spec, canaries=400, seed=1, confidence=0.95, device=CPU)
        assert found["measured_noise_multiplier"] == pytest.approx(
            spec.noise_multiplier, rel=0.2)  # 200 excluded canaries: about 5% error
        assert found["epsilon"] <= audit.accounted_epsilon(spec)
        # Included canaries are Poisson-sampled at rate q: their mean score is q T.
        assert found["mean_score_included"] == pytest.approx(
            spec.sample_rate * spec.steps, abs=4 * spec.noise_multiplier * spec.steps**0.5 / 10)


def test_white_box_catches_non_private_training() -> None:
    x, y = _table(600)
    spec = _spec(len(x), None, epochs=50)
    found = whitebox.audit(x, y, spec, canaries=200, seed=2, confidence=0.95, device=CPU)
    assert found["correct"] == found["guesses"] > 100
    assert found["epsilon"] > 2.5
    assert found["measured_noise_multiplier"] == 0.0


def test_planted_bug_noise_scaled_down_in_the_engine_raises_the_alarm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine adds a twentieth of its noise; the accountant still believes the full sigma."""
    draw = DPSGD.draw_noise

    def weak_noise(self: DPSGD, steps: int) -> list[torch.Tensor | None]:
        return [None if n is None else n.mul_(0.05) for n in draw(self, steps)]

    x, y = _table(600)
    spec = _spec(len(x), 1.0, epochs=100)
    plan = audit.AuditPlan(spec=spec, canaries=200, shadow_models=2, seed=3)
    honest = audit.run(plan, x, y, device=CPU, membership_attacks=False)
    assert not honest["alarm"] and honest["audited_epsilon"] < honest["accounted_epsilon"]
    monkeypatch.setattr(DPSGD, "draw_noise", weak_noise)
    buggy = audit.run(plan, x, y, device=CPU, membership_attacks=False)
    assert buggy["alarm"] and buggy["audited_by"] == "white_box"
    assert buggy["audited_epsilon"] > buggy["accounted_epsilon"] == honest["accounted_epsilon"]
    white = buggy["one_run"]["white_box"]
    assert white["measured_noise_multiplier"] == pytest.approx(0.05 * spec.noise_multiplier,
                                                               rel=0.25)


def test_membership_attacks_dp_near_chance_non_private_no_lower() -> None:
    """At epsilon 1 both attacks are at chance (over repeated runs the DP AUCs spread by about
    0.01 for the loss attack and 0.02 for LiRA; the bounds below are 4-5 of those). On this
    generator even the non-private model leaks little (a 7-parameter model on 1,400 rows), so
    "no lower" allows sampling noise: both are scored on the same records (4-5 spreads again)."""
    x, y = _table()
    found = membership.attack(x, y, _spec(len(x), 1.0), shadow_models=8, seed=4, device=CPU,
                              checkpoint=lambda _phase: None)
    assert found["members"] == found["non_members"] == len(x) // 2
    assert found["shadow_models"] == 8
    for attack, spread in (("loss", 0.05), ("lira", 0.08)):
        assert abs(found["dp"][attack]["roc_auc"] - 0.5) < spread
        assert found["dp"][attack]["tpr_at_1pct_fpr"] < 0.06
    assert found["non_private"]["loss"]["roc_auc"] >= found["dp"]["loss"]["roc_auc"] - 0.04


def test_black_box_canaries_keep_the_jobs_sampling_plan() -> None:
    x, y = _table(600)
    spec = _spec(len(x), 3.0, batch_size=64, epochs=5)
    wider = spec_for_rows(spec, len(x) + 137)
    assert accounting.poisson_plan(len(x) + 137, wider.batch_size) == (
        spec.sample_rate, spec.steps // spec.epochs)
    x_c, y_c = canary_rows(50, np.random.default_rng(0))
    assert ((x_c >= 0) & (x_c <= 100)).all() and set(np.unique(y_c)) <= {0.0, 1.0}
    found = blackbox.audit(x, y, spec, canaries=50, seed=5, confidence=0.95, device=CPU)
    assert 0.0 <= found["epsilon"] <= audit.accounted_epsilon(spec)
    fresh, _ = fresh_rows(10, 0, purpose=1)
    assert not np.array_equal(fresh, synthetic.generate(10, 0).x)
