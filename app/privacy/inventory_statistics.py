"""The release inventory of DP cohort statistics (``app.statistics``): the release's response
fields, the ledger and report fields that name a statistics release, and the report page's
statistics table. See ``app.privacy.inventory``."""

from app.privacy.releases import Entry, Release, entry, fields

PUBLIC_INPUT = Release.PUBLIC_INPUT
DP_STATISTICS = Release.DP_STATISTICS
LEDGER = Release.LEDGER
PUBLIC_BY_CONVENTION = Release.PUBLIC_BY_CONVENTION

RELEASE = [
    *fields("StatisticsReleaseOut", {PUBLIC_INPUT: "id dataset_id created_at library",
                                     PUBLIC_BY_CONVENTION: "rows"}),
    *fields("ReleasePrivacyOut", {
        PUBLIC_INPUT: "mechanism target_epsilon delta",
        LEDGER: "epsilon epsilon_rdp noise_multiplier ledger_entry_id",
        (LEDGER, PUBLIC_BY_CONVENTION): "statement",
    }),
    *fields("AnswerOut", {PUBLIC_INPUT: "index kind feature bins by share estimator"}),
    *fields("NoiseOut", {PUBLIC_INPUT: "of cells distribution sensitivity norm sampler",
                         LEDGER: "scale rho epsilon"},
            note="the noise's parameters: functions of the request and the declared bounds"),
    *fields("CellOut", {PUBLIC_INPUT: "group bin"},
            note="group keys and bins come from the schema and the request, never the data"),
    *fields("CellOut", {DP_STATISTICS: "value standard_error ci95"},
            note="a noisy value; a ratio's error and interval are computed from the noisy "
            "vectors (post-processing)"),
    *fields("StatisticsPage", {PUBLIC_INPUT: "total limit offset"}),
]

LEDGER_AND_REPORT = [
    *fields("LedgerEntryView", {LEDGER: "statistics_release_id components"}),
    *fields("TimelinePointView", {LEDGER: "statistics_release_id"}),
    *fields("StatisticsReleaseSummary", {
        PUBLIC_INPUT: "id href created_at mechanism target_epsilon delta queries",
        LEDGER: "epsilon epsilon_text ledger_entry_id",
        PUBLIC_BY_CONVENTION: "rows cells",
    }),
    entry("template:dataset.html:statistics_table", (PUBLIC_INPUT, PUBLIC_BY_CONVENTION, LEDGER),
          "the statistics releases: requests, targets, epsilons and cell counts (no values)"),
]

STATISTICS_ENTRIES: list[Entry] = [*RELEASE, *LEDGER_AND_REPORT]
