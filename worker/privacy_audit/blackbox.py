"""Black-box one-run audit: canary records in the training table, scored by the final model.

The auditor of Steinke et al. (2023) that sees only the released model: m mislabelled
out-of-distribution records (``data.canary_rows``), each added to the job's training rows with
probability 1/2; one training with the job's exact mechanism (the table grows, so the batch
size is adjusted to keep the sample rate and step count the ledger would charge); each canary
scored by its logit-scaled confidence in its own label (minus the loss, up to a monotone map).
Weaker than the white-box auditor: a small model cannot memorise individual records, so its
bound is usually near 0, and that is the expected result, not a failure.
"""

from typing import Any

import numpy as np
import torch

from app.privacy_audit import bounds
from worker.privacy_audit.data import canary_rows, fit, signed_logits
from worker.training import TrainingSpec


def audit(
    x_train: np.ndarray, y_train: np.ndarray, spec: TrainingSpec, *, canaries: int, seed: int,
    confidence: float, device: torch.device,
) -> dict[str, Any]:
    """Train once with the included canaries and bound epsilon from their scores."""
    rng = np.random.default_rng([seed, 3])
    x_canary, y_canary = canary_rows(canaries, rng)
    included = rng.random(canaries) < 0.5
    network = fit(
        np.concatenate([x_train, x_canary[included]]),
        np.concatenate([y_train, y_canary[included]]),
        spec, device,
    )
    scores = signed_logits(network, x_canary, y_canary)
    bound = bounds.audit(scores, included, delta=spec.delta, confidence=confidence)
    return {
        **bound.as_dict(),
        "canary": "mislabelled out-of-distribution record (uniform over the public feature "
        "ranges, with the label the generator makes unlikely)",
        "score": "the final model's log-odds of the canary's own label (minus the loss)",
    }
