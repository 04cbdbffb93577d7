"""The peers ``bench/proxy_study.py`` sets the defaults beside, and its metrics.

* Opacus as a user would run it from its tutorial: ``make_private_with_epsilon`` on a
  logistic model (one linear layer), a DataLoader of batch 256 (the whole training part when
  it is smaller), Poisson sampling, 20 epochs, plain SGD at lr 0.5, clip 1, the last iterate,
  Opacus' own accountant (PRV in 1.6) at the job's delta. No calibration: a user of the
  tutorial has none.
* DP-EBM: InterpretML's differentially private explainable boosting
  (``interpret.privacy.DPExplainableBoostingClassifier``, ``interpret-core`` 0.7.8) with its
  defaults at the cell's (epsilon, delta) (interpret's own accounting), given the declared
  public quantities only: each numeric feature ``continuous`` with its declared (lower, upper)
  as its privacy bounds (values clipped to them), each binary or categorical feature
  ``continuous`` over its codes with the public bounds (-0.5, k - 0.5) for its k declared
  categories. Interpret's nominal and ordinal types are not used: in 0.7.8 their private
  binning takes the categories from ``np.unique`` of the rows (whatever list was declared),
  so a fit given them is not DP as configured. An additive model a clinic's statistician
  would reach for; no calibration of ours.
* The service's DP-EBM family's fit (``app.families.ebm_network.fit_ebm``): the same
  interpret estimator with every feature binned over its public range (codes for binary and
  categorical ones) and the noise planned so that the exact event spends the cell's
  (epsilon, delta); scored by its shape tables, without the service's calibration.
* The base rate: every row gets the training part's prevalence. The non-DP one is what
  "knowing nothing but the prevalence" scores; the DP one releases the positives' count with
  one Gaussian at the cell's (epsilon, delta) (sensitivity 1; the row count is public by
  convention), so it is a peer at the same budget.

Everything here runs on public tables: exact metrics are fine (the service itself releases
them with noise).
"""

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from opacus import PrivacyEngine
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from app.datasets.schema.dataset_schema import DatasetSchema, FeatureKind
from app.jobs.size_floor import gaussian_noise

OPACUS_BATCH, OPACUS_EPOCHS, OPACUS_LR, OPACUS_CLIP = 256, 20, 0.5, 1.0
PROBABILITY_FLOOR = 1e-12  # log-loss of a probability of exactly 0 or 1 is clipped here


@dataclass(frozen=True)
class Scores:
    auc: float
    log_loss: float
    brier: float


def scores(y: np.ndarray, p: np.ndarray) -> Scores:
    """AUC, log-loss (natural log) and Brier score of probabilities ``p`` for outcomes ``y``."""
    p = np.clip(np.asarray(p, float), PROBABILITY_FLOOR, 1 - PROBABILITY_FLOOR)
    auc = float(roc_auc_score(y, p)) if np.ptp(p) > 0 else 0.5
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))
    return Scores(auc, loss, float(np.mean((p - y) ** 2)))


def opacus_user_fit(x: np.ndarray, y: np.ndarray, *, epsilon: float, delta: float,
                    seed: int) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of the tutorial recipe on encoded rows ``x``."""
    torch.manual_seed(seed)
    n, d = x.shape
    model = nn.Linear(d, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=OPACUS_LR)
    data = TensorDataset(torch.as_tensor(x, dtype=torch.float32),
                         torch.as_tensor(y, dtype=torch.float32))
    loader = DataLoader(data, batch_size=min(OPACUS_BATCH, n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine()
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model, optimizer=optimizer, data_loader=loader, target_epsilon=epsilon,
            target_delta=delta, epochs=OPACUS_EPOCHS, max_grad_norm=OPACUS_CLIP,
            poisson_sampling=True)
        criterion = nn.BCEWithLogitsLoss()
        for _ in range(OPACUS_EPOCHS):
            for xb, yb in loader:
                if len(yb) == 0:  # an empty Poisson batch: the tutorial's loop would crash
                    continue
                optimizer.zero_grad()
                criterion(model(xb).squeeze(-1), yb).backward()
                optimizer.step()
    linear = model._module  # the GradSampleModule's wrapped layer
    return (linear.weight.detach().double().numpy()[0],
            float(linear.bias.detach().double().numpy()[0]))


def base_rate(y_train: np.ndarray) -> float:
    """The non-DP base rate: the training part's prevalence."""
    return float(np.mean(y_train))


def dp_base_rate(y_train: np.ndarray, *, epsilon: float, delta: float,
                 rng: np.random.Generator) -> float:
    """The training part's prevalence from one Gaussian release of its positives at
    (``epsilon``, ``delta``), kept within half a row of 0 and 1."""
    n = len(y_train)
    noisy = float(np.sum(y_train)) + rng.normal(0.0, gaussian_noise(epsilon, delta))
    return float(np.clip(noisy / n, 0.5 / n, 1 - 0.5 / n))


def _ebm_layout(schema: DatasetSchema) -> tuple[list[str], dict[int, tuple[float, float]]]:
    """DP-EBM's feature types and privacy bounds from the declared schema only (the module's
    list): every feature ``continuous``; a numeric one over its declared bounds, a binary or
    categorical one over its codes, (-0.5, k - 0.5) for k declared categories."""
    bounds: dict[int, tuple[float, float]] = {}
    for index, feature in enumerate(schema.features):
        if feature.kind in (FeatureKind.BINARY, FeatureKind.CATEGORICAL):
            bounds[index] = (-0.5, feature.bounds[1] + 0.5)
        else:
            bounds[index] = (float(feature.bounds[0]), float(feature.bounds[1]))
    return ["continuous"] * len(schema.features), bounds


def _ebm_rows(x: np.ndarray, bounds: dict[int, tuple[float, float]]) -> np.ndarray:
    """Raw rows as float codes, each numeric value clipped to its declared bounds (codes lie
    inside theirs by the declaration)."""
    rows = np.array(x, dtype=np.float64)
    for index, (lower, upper) in bounds.items():
        rows[:, index] = np.clip(rows[:, index], lower, upper)
    return rows


def dp_ebm_fit(schema: DatasetSchema, x: np.ndarray, y: np.ndarray, *, epsilon: float,
               delta: float) -> Callable[[np.ndarray], np.ndarray]:
    """DP-EBM (see the module) trained on raw rows ``x``: returns raw rows -> probabilities.
    Its noise comes from fresh entropy (a fixed random_state makes it deterministic)."""
    from interpret.privacy import DPExplainableBoostingClassifier  # the bench extra only

    types, bounds = _ebm_layout(schema)
    model = DPExplainableBoostingClassifier(
        feature_types=types, privacy_bounds=bounds, epsilon=epsilon, delta=delta, n_jobs=1)
    with warnings.catch_warnings():
        # interpret warns where it reads bounds or types off the rows: not this peer's setting
        warnings.filterwarnings("error", message="Possible privacy violation")
        model.fit(_ebm_rows(x, bounds), y.astype(int))
    return lambda rows: np.asarray(model.predict_proba(_ebm_rows(rows, bounds))[:, 1], float)


def dp_ebm_family_fit(schema: DatasetSchema, x: np.ndarray, y: np.ndarray, *, epsilon: float,
                      delta: float) -> Callable[[np.ndarray], np.ndarray]:
    """The dp_ebm family's fit (see the module) on raw rows ``x``: raw rows -> probabilities."""
    from app.families.ebm_accounting import EbmRecipe, plan
    from app.families.ebm_layout import interpret_rows
    from app.families.ebm_network import fit_ebm

    noise = plan(EbmRecipe(epsilon, delta, len(schema.features)))
    tables = fit_ebm(schema, x, y, noise).tables
    return lambda rows: 1.0 / (1.0 + np.exp(-tables.log_odds(interpret_rows(schema, rows))))
