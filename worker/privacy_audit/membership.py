"""Membership inference against the job's mechanism: a loss threshold and LiRA with shadows.

Target: a model trained with the job's exact settings on the dataset's training rows. Members
are a random subset of those rows; non-members are fresh generator draws. Shadow models
(Carlini et al. 2022, online LiRA) are trained on tables of the same size: a random half of the
member/non-member pool (each pool record is "in" exactly half the shadows) topped up with fresh
draws. A record's score is the log-likelihood ratio of the target's logit-scaled confidence
under the Gaussians fitted to its in- and out-shadows, with one variance per side pooled over
all records (the fixed-variance variant, stable with a few shadows).

The same attack runs against the DP model and a non-private model trained on the same rows with
noise 0, each with shadows trained like itself.
"""

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from app.privacy_audit.roc import attack_summary
from worker.privacy_audit.data import fit, fresh_rows, signed_logits
from worker.training import TrainingSpec

MAX_EVAL = 1000  # members (and as many non-members) scored; bounds the audit's cost
Checkpoint = Callable[[str], None]
"""Called between trainings with a phase name: renews the lease, may stop the audit."""


def lira_scores(target: np.ndarray, shadows: np.ndarray, is_in: np.ndarray) -> np.ndarray:
    """Per-record log N(target; mu_in, s_in) - log N(target; mu_out, s_out).

    Args:
        target: (n,) the target model's signed logits.
        shadows: (k, n) the shadow models' signed logits.
        is_in: (k, n) whether each record was in each shadow's training table.
    """
    def side(mask: np.ndarray) -> tuple[np.ndarray, float]:
        counts = mask.sum(axis=0)
        mean = (shadows * mask).sum(axis=0) / np.maximum(counts, 1)
        resid = (shadows - mean) * mask
        std = float(np.sqrt((resid**2).sum() / max(mask.sum() - mask.shape[1], 1)))
        return mean, max(std, 1e-6)

    mu_in, s_in = side(is_in)
    mu_out, s_out = side(~is_in)
    log_in = -0.5 * ((target - mu_in) / s_in) ** 2 - np.log(s_in)
    log_out = -0.5 * ((target - mu_out) / s_out) ** 2 - np.log(s_out)
    return log_in - log_out


def _loss_scores(signed: np.ndarray) -> np.ndarray:
    """Minus the cross-entropy loss, log sigmoid(signed logit): higher is more member-like."""
    return -np.logaddexp(0.0, -signed)


def attack(
    x_train: np.ndarray,
    y_train: np.ndarray,
    spec: TrainingSpec,
    *,
    shadow_models: int,
    seed: int,
    device: torch.device,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    """Loss and LiRA attacks on the DP model and on a non-private one (same rows, noise 0)."""
    rng = np.random.default_rng([seed, 1])
    n_train = len(x_train)
    n_eval = min(n_train // 2, MAX_EVAL)
    members = rng.choice(n_train, n_eval, replace=False)
    x_out, y_out = fresh_rows(n_eval, seed, purpose=1)
    x_pool = np.concatenate([x_train[members], x_out])
    y_pool = np.concatenate([y_train[members], y_out])
    # Each pool record is in exactly half the shadows (a random half per record).
    is_in = rng.random((shadow_models, len(x_pool))).argsort(axis=0) < shadow_models // 2
    fillers = [fresh_rows(n_train, seed, purpose=100 + j) for j in range(shadow_models)]
    result: dict[str, Any] = {
        "members": n_eval,
        "non_members": n_eval,
        "shadow_models": shadow_models,
        "non_member_source": "fresh draws from the generator",
    }
    for name, model_spec in (("dp", spec), ("non_private", replace(spec, noise_multiplier=0.0))):
        checkpoint(f"membership {name}: target")
        target = signed_logits(fit(x_train, y_train, model_spec, device), x_pool, y_pool)
        shadows = np.empty((shadow_models, len(x_pool)))
        for j, (x_fill, y_fill) in enumerate(fillers):
            checkpoint(f"membership {name}: shadow {j + 1} of {shadow_models}")
            take = is_in[j]
            n_fill = n_train - int(take.sum())
            x_shadow = np.concatenate([x_pool[take], x_fill[:n_fill]])
            y_shadow = np.concatenate([y_pool[take], y_fill[:n_fill]])
            shadows[j] = signed_logits(fit(x_shadow, y_shadow, model_spec, device), x_pool, y_pool)
        loss = _loss_scores(target)
        lira = lira_scores(target, shadows, is_in)
        result[name] = {
            "loss": attack_summary(loss[:n_eval], loss[n_eval:]),
            "lira": attack_summary(lira[:n_eval], lira[n_eval:]),
        }
    return result
