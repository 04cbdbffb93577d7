"""The release inventory of champion/challenger comparisons.

A comparison's figures are post-processing of its one Gaussian release on the follow-up's
evaluation part (both models' evaluation histograms, ``worker.monitoring.comparison``:
classified ``DP_EVALUATION``, the mechanism the training-time evaluation uses). Its noise and
target are the ledger's. Retraining from a run answers with a job (``JobOut``, classified with
the jobs).
"""

from app.privacy.releases import Entry, Release, entry, fields

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
OPERATIONAL = Release.OPERATIONAL
DP_EVALUATION = Release.DP_EVALUATION

COMPARISON_ENTRIES: list[Entry] = [
    *fields("ComparisonOut", {
        PUBLIC_INPUT: "id champion_id challenger_id dataset_id target_epsilon created_at",
        OPERATIONAL: "status finished_at",
        LEDGER: "delta noise_multiplier l2_sensitivity",
        (DP_EVALUATION, PUBLIC_INPUT): "notes",
        DP_EVALUATION: "verdict",
    }),
    entry("ComparisonOut.champion", DP_EVALUATION,
          "the champion's DP evaluation on the follow-up's evaluation part (the training-time "
          "evaluation's shape: noisy histograms as released, every metric post-processing)"),
    entry("ComparisonOut.challenger", DP_EVALUATION,
          "the challenger's DP evaluation, from the same release"),
    entry("ComparisonOut.difference", DP_EVALUATION,
          "challenger minus champion per metric with intervals from both models' noisy "
          "histograms of the one release: post-processing of it"),
]
