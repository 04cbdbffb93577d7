"""The words stored beside the evaluation's numbers: what each metric means and how it was made.

Kept apart from ``worker.evaluation`` so the texts can be read (and reviewed by a privacy officer)
in one place; the reports show them as stored.
"""

POST_PROCESSING = (
    "ROC-AUC, PR-AUC, Brier score, prevalence and the band figures are read off the noisy "
    "counts as released: each is a ratio of sums of cells, or of products of two different "
    "cells, whose noise is independent with mean 0, so they carry no bias from the noise beyond "
    "a ratio's small second-order one (rates clipped to [0, 1]). The per-bin figures (the "
    "reliability bins, the ROC curve) are read off the non-negative counts nearest to the "
    "released ones with the same total per outcome (a projection, which keeps them monotone "
    "but pulls a ranking towards chance where noise dominates a bin)."
)

DEFINITIONS = {
    "release": "One Gaussian mechanism on the evaluation part: counts of rows per (public score "
    "bin, outcome), for all rows and per (group, bin, outcome) for each grouping. A record adds 1 "
    "to one cell of each histogram, so the L2 sensitivity is sqrt(1 + groupings); every cell gets "
    "noise of std noise_multiplier x sensitivity. Every figure below is computed from these noisy "
    "counts alone (post-processing), so it is covered by the same guarantee. exact: true means "
    "noise multiplier 0, allowed only on a public dataset.",
    "rows": "rows and positives are noisy counts (estimates, one decimal), not tallies; the noise "
    "on a sum of m cells has std noise_std x sqrt(m).",
    "roc_auc": "Chance that a random positive scores in a higher bin than a random negative, a tie "
    "within a bin counting half (ROC-AUC of the scores discretised to the bins); 0.5 is chance.",
    "pr_auc": "Average precision over the bin thresholds: mean over positives of the precision "
    "when flagging their bin and every bin above. A random ranker scores the prevalence.",
    "brier": "Brier score of the binned forecast: each probability replaced by its bin's midpoint "
    "(p_representative), scored against the noisy outcome counts of the bin. brier_baseline "
    "predicts the (noisy) prevalence for every row; a model must beat it. No expected "
    "calibration error: its absolute gaps would turn the noise into a bias.",
    "reliability": "Per public bin: its edges and midpoint, noisy rows and positives, and the "
    "observed rate positives / rows with its interval. The edges are public: evenly spaced in "
    "log-odds around the model's declared band cut-offs (which are edges), never "
    "taken from the data.",
    "roc_curve": "False and true positive rates when flagging every row whose probability is at "
    "or above each bin edge.",
    "bands": "A row is high if p >= medium_high, medium if low_medium <= p < medium_high, low "
    "otherwise (the cut-offs are bin edges). 'exactly': rows in this band; 'at_or_above': this "
    "band or a higher one. precision = positives / rows; recall = positives / all positives; "
    "share_of_rows = rows / all rows.",
    "ci": "95% parametric bootstrap over the release: plausible true counts are drawn around the "
    "projected counts (Poisson), fresh Gaussian noise of the release's std is added and the "
    "same estimators are applied; a figure's interval is its released value minus the 97.5th "
    "and 2.5th percentiles of the replicates' errors (basic interval; per-bin figures and "
    "PR-AUC: the replicates' percentiles), widened to hold the figure. It covers the "
    "held-out rows' sampling and the DP noise: the truth covered is the model's figure on the "
    "population they were drawn from (bench/coverage.py).",
    "none": "A metric is None when its noisy denominator is below twice the noise std of that "
    "denominator (it could be 0), or below 1; ROC-AUC and PR-AUC also need 5 positives and 5 "
    "negatives, and PR-AUC is None where the noise std of the positives' total is over 15% "
    "of it (its top bins' precisions would be mostly noise). A band's precision is None when "
    "the band's rows, estimated apart from its own noisy cells, are below twice the noise std "
    "of its count: the part's public row count less the noisy rows outside the band (a "
    "subgroup's: the whole part's band less the other groups'; with neither a public count nor "
    "a grouping, its own rows). Deciding on its own noisy rows would show it when the noise "
    "inflated them, and half that noise is its positives', which leans the figures shown "
    "towards 1/2. An interval is None when over 2.5% of replicates leave it undefined.",
    "subgroups": "The same metrics per group of each grouping (labels from the public schema); "
    "an empty group is still listed, its counts pure noise.",
}


def ci_method(n_bootstrap: int, noise_multiplier: float) -> str:
    """How the stored intervals were made, in one line."""
    if n_bootstrap < 1:
        return "none (n_bootstrap=0)"
    noise = "fresh Gaussian noise of the release's std" if noise_multiplier > 0 else "no noise"
    return (f"parametric bootstrap over the released counts, {n_bootstrap} replicates "
            f"(Poisson sampling around the projected counts plus {noise}), basic interval "
            "about each released figure (per-bin figures and PR-AUC: percentile)")
