"""The release inventory of federations: what a coordinator and a clinic show.

The declaration is public by agreement between the clinics (sites, public weights, addresses,
the schema's hash, the recipe). A round's membership is operational (which site answered), not
a statistic of rows. Each site's (epsilon, delta) is its ledger's figure of its public plan; the
federation's statement is the worst of them. The federation's evaluation is post-processing of
the sites' DP evaluation releases (their noisy histograms, summed). The global model itself is
FedAvg of the sites' DP-SGD releases: post-processing, its guarantee each site's own charge.
"""

from app.privacy.releases import Entry, Release, entry, fields

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
OPERATIONAL = Release.OPERATIONAL
DP_EVALUATION = Release.DP_EVALUATION
DP_TRAINING = Release.DP_TRAINING

FEDERATION_ENTRIES: list[Entry] = [
    *fields("FederationOut", {
        PUBLIC_INPUT: "id name role address schema_sha256 site_name created_at",
        OPERATIONAL: "state",
    }, note="a federation as this service declared it"),
    *fields("FederatedRecipe", {
        PUBLIC_INPUT: "model hidden_units rounds local_steps target_epsilon delta batch_size "
                      "optimizer learning_rate momentum max_grad_norm min_sites "
                      "round_timeout_seconds tail_average secure_aggregation",
    }, note="the recipe the clinics agreed on"),
    *fields("FederationSite", {PUBLIC_INPUT: "name weight public_key"},
            note="a declared site and its public FedAvg weight (never a row count)"),
    *fields("FederationRound", {OPERATIONAL: "round sites failures refused"},
            note="which sites' updates a round averaged: who answered, not what their rows hold"),
    *fields("SiteStatement", {LEDGER: "epsilon delta"},
            note="a site's planned guarantee, computed by the coordinator from the public "
            "mechanism its answers declare"),
    *fields("FederationReport", {
        OPERATIONAL: "evaluated_sites",
        LEDGER: "federation_epsilon federation_delta",
    }, note="the coordinator's report"),
    entry("FederationReport.model_sha256", DP_TRAINING,
          "the SHA-256 of the released global model's weights (post-processing of the sites' "
          "DP-SGD releases): the model every clinic evaluated and registered"),
    entry("FederationReport.site_statements", LEDGER,
          "each site's planned (epsilon, delta), keyed by declared site name"),
    entry("FederationReport.evaluation", DP_EVALUATION,
          "the sites' noisy evaluation histograms summed (the sum's noise is the root sum of "
          "squares of theirs); every metric post-processing of the sum"),
    *fields("FederationRecord", {
        PUBLIC_INPUT: "name site rounds sites secure_aggregation",
        LEDGER: "rounds_run federation_epsilon federation_delta",
        DP_TRAINING: "model_sha256",
    }, note="a federated model's federation, as its clinic's registry shows it"),
]
