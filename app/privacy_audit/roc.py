"""How well a membership-inference attack separates members from non-members.

Scores: higher means "more likely a member". Reported as in Carlini et al. (2022), "Membership
Inference Attacks From First Principles": ROC-AUC, the true-positive rate at a low false-positive
rate (1% and 0.1%: an attack matters when it is confident about a few records, not on average),
and the membership advantage max(TPR - FPR) of Yeom et al. (2018).
"""

from typing import Any

import numpy as np
from scipy.stats import rankdata

LOW_FPRS = (0.01, 0.001)
# The ROC curve kept for reports (enough for a plot, small as JSON): at each of these FPRs, the
# best point at or below it, so a report can read "TPR at FPR <= f" off the kept curve.
CURVE_FPRS = np.unique(np.r_[np.linspace(0.0, 1.0, 101), 0.001, 0.002, 0.005])


def roc_auc(members: np.ndarray, non_members: np.ndarray) -> float:
    """P[member score > non-member score] + half the ties (the Mann-Whitney statistic)."""
    n_in, n_out = len(members), len(non_members)
    ranks = rankdata(np.concatenate([members, non_members]))
    return float((ranks[:n_in].sum() - n_in * (n_in + 1) / 2) / (n_in * n_out))


def roc_curve(members: np.ndarray, non_members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) at every distinct threshold "score >= t", from (0, 0) to (1, 1)."""
    scores = np.concatenate([members, non_members])
    is_member = np.concatenate([np.ones(len(members)), np.zeros(len(non_members))])
    order = np.argsort(-scores, kind="stable")
    scores, is_member = scores[order], is_member[order]
    last_of_tie = np.r_[np.diff(scores) != 0, True]
    tp = np.cumsum(is_member)[last_of_tie]
    fp = np.cumsum(1 - is_member)[last_of_tie]
    tpr = np.r_[0.0, tp / max(len(members), 1)]
    fpr = np.r_[0.0, fp / max(len(non_members), 1)]
    return fpr, tpr


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, target: float) -> float:
    """The best TPR of a threshold whose FPR is at most ``target`` (no interpolation)."""
    return float(tpr[fpr <= target + 1e-12].max())


def attack_summary(members: np.ndarray, non_members: np.ndarray) -> dict[str, Any]:
    """AUC, TPR at 1% and 0.1% FPR, advantage, and a thinned ROC curve for the plot.

    With n non-members the smallest non-zero FPR is 1/n: below it, "TPR at FPR" means TPR with
    no false positive at all, which is what is reported (``fpr_resolution`` says so).
    """
    fpr, tpr = roc_curve(members, non_members)
    keep = np.unique(np.r_[0, np.searchsorted(fpr, CURVE_FPRS + 1e-12, side="right") - 1])
    return {
        "roc_auc": roc_auc(members, non_members),
        "tpr_at_1pct_fpr": tpr_at_fpr(fpr, tpr, LOW_FPRS[0]),
        "tpr_at_0_1pct_fpr": tpr_at_fpr(fpr, tpr, LOW_FPRS[1]),
        "advantage": float(np.max(tpr - fpr)),
        "members": len(members),
        "non_members": len(non_members),
        "fpr_resolution": 1.0 / max(len(non_members), 1),
        "roc": [[float(f), float(t)] for f, t in zip(fpr[keep], tpr[keep], strict=True)],
    }
