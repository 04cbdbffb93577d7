"""The release inventory of monitoring: follow-up registrations and monitoring runs.

A run's figures are post-processing of its one Gaussian release on the follow-up (the
evaluation's histograms and the features' histograms, ``worker.monitoring.task``: classified
``DP_EVALUATION``, the mechanism the training-time evaluation uses), of the model's
training-time evaluation release, and of the reference statistics release of the training
dataset's features (``DP_STATISTICS``). The run's noise and target are the ledger's.
"""

from app.privacy.releases import Entry, Release, entry, fields

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
OPERATIONAL = Release.OPERATIONAL
DP_EVALUATION = Release.DP_EVALUATION
DP_STATISTICS = Release.DP_STATISTICS

MONITORING_ENTRIES: list[Entry] = [
    *fields("FollowUpOut", {PUBLIC_INPUT: "model_id period_start period_end labelled"}),
    *fields("MonitoringRunOut", {
        PUBLIC_INPUT: "id model_id dataset_id job_id reference_release_id created_at",
        OPERATIONAL: "status finished_at",
        (DP_EVALUATION, PUBLIC_INPUT): "roc_auc roc_auc_ci notes",
    }),
    entry("MonitoringRunOut.performance", DP_EVALUATION,
          "the follow-up's DP evaluation (the training-time evaluation's shape: noisy "
          "histograms as released, every metric post-processing of them) and its drift "
          "against the training-time evaluation release (both releases' noise in the "
          "intervals)"),
    entry("MonitoringRunOut.fairness", DP_EVALUATION,
          "gaps between subgroups of the follow-up's and of the training-time evaluation "
          "releases, with intervals: post-processing of those releases"),
    *fields("FeatureDriftOut", {
        PUBLIC_INPUT: "name bins",
        (DP_EVALUATION, DP_STATISTICS): "psi psi_ci wasserstein wasserstein_ci verdict notes",
        DP_EVALUATION: "follow_up",
        DP_STATISTICS: "reference",
    }),
    *fields("RunPrivacyOut", {
        PUBLIC_INPUT: "target_epsilon",
        LEDGER: "delta noise_multiplier l2_sensitivity",
    }),
    *fields("PeriodOut", {PUBLIC_INPUT: "start end"}),
    *fields("MonitoringTimeline", {PUBLIC_INPUT: "model_id outcome"}),
    # The page's charts (app.reports.monitoring_plots): post-processing of the same releases.
    entry("template:monitoring.html:reliability", (PUBLIC_INPUT, DP_EVALUATION),
          "the training-time evaluation's and the latest run's reliability bins (public "
          "edges; noisy rows and positives as released, rates their clipped ratio)"),
    entry("template:monitoring.html:drift_plot", (PUBLIC_INPUT, DP_EVALUATION, DP_STATISTICS),
          "each feature's name, PSI, PSI interval and verdict, as FeatureDriftOut"),
    entry("template:monitoring.html:auc_plot", (PUBLIC_INPUT, DP_EVALUATION),
          "each finished run's id, ROC-AUC and interval, and the training-time ROC-AUC its "
          "drift recomputed from the training-time evaluation release"),
]
