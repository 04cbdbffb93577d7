"""Rows an audit needs besides the job's own: fresh generator draws, canaries, and the fitting.

Audits run on public synthetic datasets only, so the generator can draw as many new patients
as the shadow models and non-member sets need: no real record is touched twice.
"""

from dataclasses import replace

import numpy as np
import torch
from torch import nn

from app.datasets import synthetic
from app.datasets.schema.encoding import BUILT_IN_ENCODER
from app.features import FEATURES
from app.privacy.accounting import poisson_plan
from app.registry.network import predict_logits
from worker.training import TrainingSpec, train

FRESH_SEED_BASE = 2**31
"""Generator seeds for fresh draws start here: dataset seeds are below it, so a "fresh" row
set can never be a dataset's own rows."""


def fresh_rows(n_rows: int, seed: int, purpose: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_rows`` new patients (raw features, labels), reproducible from (seed, purpose)."""
    derived = np.random.default_rng([seed, purpose]).integers(0, 2**30)
    table = synthetic.generate(n_rows, FRESH_SEED_BASE + int(derived))
    return table.x, table.y


def canary_rows(m: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``m`` mislabelled out-of-distribution records: black-box canaries.

    Features are uniform over each feature's public range (the generator concentrates sessions
    near 5 and GAF near 60, so most canaries sit where few patients do), and each label is the
    one the generator's true risk makes unlikely, so a model that fits a canary shows it.
    """
    columns = []
    for feature in FEATURES:
        if feature.kind == "binary":
            columns.append(rng.integers(0, 2, m).astype(float))
        else:
            columns.append(rng.integers(int(feature.lower), int(feature.upper) + 1, m) * 1.0)
    x = np.column_stack(columns)
    likely = synthetic.true_logit(x) >= 0.0
    return x, (~likely).astype(float)


def spec_for_rows(spec: TrainingSpec, n_rows: int) -> TrainingSpec:
    """The same mechanism on a table of ``n_rows``: the batch size that keeps q and the steps.

    Raises:
        ValueError: no batch size gives the job's sample rate on that many rows.
    """
    per_epoch = spec.steps // spec.epochs
    batch = -(-n_rows // per_epoch)  # ceil(n / K) rows per batch gives q = 1 / K
    if poisson_plan(n_rows, batch) != (spec.sample_rate, per_epoch):
        raise ValueError(f"cannot keep sample rate {spec.sample_rate} on {n_rows} rows")
    return replace(spec, batch_size=batch)


def fit(x: np.ndarray, y: np.ndarray, spec: TrainingSpec, device: torch.device) -> nn.Module:
    """Train with the job's exact mechanism (the worker's own trainer) on these rows."""
    return train(x, y, spec_for_rows(spec, len(x)), device=device).network


def signed_logits(network: nn.Module, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log(p_y / (1 - p_y)) for the true label y: the logit-scaled confidence LiRA models as
    Gaussian. Minus the loss is log(sigmoid(this)), a monotone function of it."""
    logits = predict_logits(network, torch.as_tensor(BUILT_IN_ENCODER.encode(x),
                                                     dtype=torch.float32))
    return logits.double().numpy() * (2.0 * y - 1.0)
