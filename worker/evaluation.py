"""Held-out evaluation: the only statistics of the data that leave the trust boundary."""

from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score


def evaluate(y_true: np.ndarray, probability: np.ndarray) -> dict[str, Any]:
    """ROC-AUC, PR-AUC and Brier score on held-out rows (AUCs are None for one class)."""
    both = 0 < y_true.sum() < len(y_true)
    return {
        "split": "holdout",
        "rows": int(len(y_true)),
        "positives": int(y_true.sum()),
        "roc_auc": float(roc_auc_score(y_true, probability)) if both else None,
        "pr_auc": float(average_precision_score(y_true, probability)) if both else None,
        "brier": float(brier_score_loss(y_true, probability)),
    }
