"""The two baselines of ``bench/proxy_study.py``, fitted on the same encoded training rows.

* Non-private: scikit-learn's ``LogisticRegression`` with a large C (almost no penalty), the
  model DP training is trying to match.
* diffprivlib's ``LogisticRegression`` (IBM; objective perturbation with the Vector mechanism,
  pure epsilon-DP): what a user would otherwise pick. It needs a bound on the rows' L2 norm;
  it gets the tightest public one: each numeric or binary input lies in [-1, 1] and a
  categorical feature's one-hot block has norm exactly 1, so sqrt(number of features). That is
  at most sqrt(number of inputs), so it never hurts diffprivlib. Everything else is its default
  (C = 1, intercept fitted).

diffprivlib 0.6.6 does not import with scikit-learn >= 1.6 as released: its forest module
reads names that scikit-learn's tree module no longer has, and its ``LogisticRegression``
passes ``multi_class`` to scikit-learn's constructor, which 1.8 removed. ``diffprivlib_fit``
works around both without touching what it computes: the forest module is replaced by a stub
before the import, and the estimator is built without its constructor (the same attributes
set by hand), then ``fit`` runs unchanged. Probabilities are read from ``coef_`` and
``intercept_`` (the logistic link), not through scikit-learn's ``predict_proba``.
"""

import math
import sys
import types
import warnings
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

NON_PRIVATE_C = 1e4


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def non_private_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of an almost unpenalised logistic regression."""
    model = LogisticRegression(C=NON_PRIVATE_C, max_iter=10_000, tol=1e-8)
    model.fit(x, y)
    return model.coef_[0], float(model.intercept_[0])


def _diffprivlib_class() -> Any:
    if "diffprivlib.models.forest" not in sys.modules:
        stub = types.ModuleType("diffprivlib.models.forest")

        class Unavailable:  # the forest models are not used here
            pass

        stub.RandomForestClassifier = stub.DecisionTreeClassifier = Unavailable  # type: ignore
        sys.modules["diffprivlib.models.forest"] = stub
    from diffprivlib.models import LogisticRegression as DiffprivlibLogistic

    return DiffprivlibLogistic


def diffprivlib_fit(
    x: np.ndarray, y: np.ndarray, *, epsilon: float, data_norm: float, seed: int
) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) of diffprivlib's epsilon-DP logistic regression."""
    cls = _diffprivlib_class()  # first: installs the stub before diffprivlib is imported
    from diffprivlib.accountant import BudgetAccountant

    model = cls.__new__(cls)
    settings = dict(epsilon=epsilon, data_norm=data_norm, tol=1e-4, C=1.0, fit_intercept=True,
                    max_iter=100, verbose=0, warm_start=False, n_jobs=None, random_state=seed,
                    penalty="l2", dual=False, intercept_scaling=1.0, class_weight=None,
                    solver="lbfgs", l1_ratio=None, classes_=None,
                    accountant=BudgetAccountant())
    for name, value in settings.items():
        setattr(model, name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y.astype(int))
    return np.asarray(model.coef_[0], float), float(model.intercept_[0])


def public_row_norm(n_features: int) -> float:
    """The largest L2 norm of an encoded row: one per feature (see the module docstring)."""
    return math.sqrt(n_features)
