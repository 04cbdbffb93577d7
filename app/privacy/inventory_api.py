"""The release inventory of the API's response bodies: every property of every component
schema a response can reach (``tests/privacy/test_release_inventory.py`` walks the OpenAPI
document and fails on a property without an entry, or an entry without a property).

An object whose keys the document does not enumerate (``dict[str, ...]``) is classified as a
whole, and must also be in ``OPEN_OBJECTS`` with the reason its keys are open: anything else is a
typed model, each of its properties classified here (a job's stored metrics are typed in
``app.jobs.results`` for that reason).
"""

from app.privacy.releases import Entry, Release, entry, fields, see

PUBLIC_INPUT = Release.PUBLIC_INPUT
DP_TRAINING = Release.DP_TRAINING
DP_CALIBRATION = Release.DP_CALIBRATION
DP_EVALUATION = Release.DP_EVALUATION
LEDGER = Release.LEDGER
PUBLIC_BY_CONVENTION = Release.PUBLIC_BY_CONVENTION
AUDIT = Release.AUDIT
OPERATIONAL = Release.OPERATIONAL

PAGE = "total limit offset"
STATEMENT_NOTE = "a sentence quoting the epsilons and the calibration part's row count"
IMPUTED_NOTE = ("which of the caller's features the request left out, scored at the schema's "
                "public reference value")


GROUP_METRICS = ("rows positives prevalence prevalence_ci roc_auc roc_auc_ci pr_auc pr_auc_ci "
                 "brier brier_ci brier_baseline")
HELD_OUT = [  # app.jobs.results: what a training job stores, served with its model and reports
    *fields("HeldOutEvaluation", {
        DP_EVALUATION: GROUP_METRICS,
        PUBLIC_INPUT: "split ci_level",
        LEDGER: "exact ci_method",
        (DP_EVALUATION, PUBLIC_INPUT): "notes",
    }, note="the evaluation part's one noisy histogram release and what is computed from it "
       "alone; exact only on a public dataset trained non-privately"),
    *fields("HeldOutSubgroup", {
        DP_EVALUATION: GROUP_METRICS,
        PUBLIC_INPUT: "grouping group",
        (DP_EVALUATION, PUBLIC_INPUT): "notes",
    }, note="the same metrics per group of a grouping from the public schema"),
    *fields("HeldOutRelease", {
        PUBLIC_INPUT: "mechanism l2_sensitivity bins groupings post_processing",
        LEDGER: "exact noise_multiplier noise_std",
    }, note="the mechanism, its public parameters (bins and groupings from the schema)"),
    *fields("HeldOutHistograms", {(DP_EVALUATION, PUBLIC_INPUT): "by_grouping"},
            note="noisy counts under the public groupings' and labels' names"),
    *fields("HeldOutCounts", {DP_EVALUATION: "negatives positives"}),
    *fields("HeldOutBand", {PUBLIC_INPUT: "p_from p_to"}, note="the band's public cut-offs"),
    *fields("HeldOutBandView", {DP_EVALUATION: "rows positives share_of_rows share_of_rows_ci "
                                               "precision precision_ci recall recall_ci"}),
    *fields("HeldOutBin", {PUBLIC_INPUT: "p_from p_to p_representative",
                           DP_EVALUATION: "rows positives observed_rate observed_ci"}),
    *fields("HeldOutRocPoint", {PUBLIC_INPUT: "threshold", DP_EVALUATION: "fpr tpr"}),
    *fields("HeldOutThresholds", {PUBLIC_INPUT: "low_medium medium_high"}),
    *fields("HeldOutDefinitions", {PUBLIC_INPUT: "release rows roc_auc pr_auc brier reliability "
                                                 "roc_curve bands ci none subgroups"}),
    *fields("CalibrationRecord", {
        PUBLIC_INPUT: "method bin_edges_logit",
        PUBLIC_BY_CONVENTION: "rows",
        LEDGER: "noise_multiplier",
        DP_CALIBRATION: "slope intercept noisy_counts noisy_positives",
    }, note="DP Platt scaling: one Gaussian release of binned counts of the calibration part; "
       "exact only on a public dataset trained non-privately"),
    *fields("HeldOutWarning", {
        PUBLIC_INPUT: "release",
        PUBLIC_BY_CONVENTION: "rows",
        LEDGER: "minimum_rows",
        (PUBLIC_BY_CONVENTION, LEDGER): "released message",
    }, note="a held-out part's row count against its size floor, a public rule of the noise "
       "multiplier and the public bins (app.jobs.size_floor)"),
]

AUDIT_RESULTS = [  # app.jobs.results: what a privacy-audit job stores (public synthetic data)
    *fields("AuditResults", {
        LEDGER: "accounted_epsilon non_private accountant delta",
        AUDIT: "audited_epsilon audited_by alarm one_run membership",
        PUBLIC_INPUT: "confidence canaries audited_job_id",
        OPERATIONAL: "seconds",
    }),
    *fields("AuditSettings", {
        LEDGER: "noise_multiplier sample_rate steps max_grad_norm",
        PUBLIC_INPUT: "model hidden_units epochs batch_size optimizer learning_rate momentum "
                      "tail_average",
        PUBLIC_BY_CONVENTION: "training_rows",
    }),
]

OPEN_OBJECTS: dict[str, str] = {
    "UploadOut.problem": "a failed upload's problem+json, whose members are classified as "
    "an error body's (problem:<member>)",
    # Request echoes and declarations: the caller's (or a steward's) own input.
    "JobOut.training": "the job's training request as submitted (and its defaults)",
    "AuditOut.request": "the audit's request as submitted",
    "AuditSummary.request": "the audit's request as submitted",
    "AuditReport.request": "the audit's request as submitted",
    "DatasetOut.schema": "the declared schema as the steward sent it (public declarations)",
    "AuditEventOut.detail": "each action's request and outcome as the audit log keeps it; "
    "its kinds are listed in its entry",
    "CdsService.prefetch": "prefetch templates keyed by the declared schema's feature names",
    "ReferenceOut.features": "the public reference patient, keyed by feature name",
    # Maps keyed by public names.
    "DatasetOut.imputed": "imputed counts keyed by the declared schema's feature names "
    "(stewards and admins only)",
    "PatientOverlapOut.shared_with": "keyed by earlier dataset ids (public ids); exact counts "
    "of shared patients, served to stewards and admins only",
    "JobPrivacyOut.epsilon_planned": "keyed by accountant name (rdp, pld; prv: pld's "
    "deprecated alias for one release)",
    "ModelOut.band_thresholds": "keyed by the band cut-offs' names (low_medium, medium_high)",
    "RiskResult.band_thresholds": "keyed by the band cut-offs' names",
    "RiskBatchResult.band_thresholds": "keyed by the band cut-offs' names",
    "RiskBatchResponse.band_thresholds": "keyed by the band cut-offs' names",
    "RiskBatchCompact.band_thresholds": "keyed by the band cut-offs' names",
    "CellOut.group": "a statistics cell's group, keyed by the request's grouping columns",
    "AnswerOut.by": "the request's grouping columns (names, or binned-column objects)",
    "HeldOutRelease.groupings": "keyed by the schema's grouping names, listing public labels",
    "HeldOutHistograms.by_grouping": "keyed by the schema's grouping names and group labels; "
    "each value a typed histogram (HeldOutCounts)",
    "AuditResults.seconds": "keyed by audit phase (white_box, black_box, membership, total)",
    # Privacy-audit results: computed on public synthetic data only (AUDIT), any figure exact.
    "AuditResults.one_run": "the one-run audits' bounds and counts, on public synthetic data",
    "AuditResults.membership": "the membership attacks' results, on public synthetic data",
    "AuditReport.one_run": "the one-run audits' bounds and counts, on public synthetic data",
    "AuditReport.membership": "the membership attacks' results, on public synthetic data",
    "AuditReport.settings": "the audited mechanism's settings (AuditSettings' keys)",
    "AuditReport.seconds": "seconds per audit phase",
    "MonitoringRunOut.performance": "the follow-up's DP evaluation: HeldOutEvaluation's keys",
    "MonitoringRunOut.fairness": "subgroup gaps (worker.monitoring.fairness), each classified",
    "ComparisonOut.champion": "a DP evaluation on the follow-up: HeldOutEvaluation's keys",
    "ComparisonOut.challenger": "a DP evaluation on the follow-up: HeldOutEvaluation's keys",
    "ComparisonOut.difference": "per metric change, interval and verdict "
                                "(worker.monitoring.drift.performance_drift)",
    "FederationReport.site_statements": "keyed by the federation's declared site names; each "
    "value a typed (epsilon, delta) statement (SiteStatement)",
    "FederationReport.evaluation": "the federation's DP evaluation: HeldOutEvaluation's "
    "evaluation keys, computed from the sum of the sites' released histograms",
}
"""Objects in a response whose keys the OpenAPI document does not enumerate, and why that is
safe: a new one fails ``tests/privacy/test_release_inventory.py`` until it is typed or listed
here. Any other object is a typed model, each property classified."""

PROBLEMS = [
    *fields("Problem", {(PUBLIC_INPUT, LEDGER): "type title status detail instance"},
            note="errors about the request; each extra member is enumerated in the entries "
            "problem:<member> (inventory_http)"),
    *fields("FieldProblem", {PUBLIC_INPUT: "field", (PUBLIC_INPUT, LEDGER): "message allowed"},
            note="a budget below spend quotes the ledger's spend"),
    *fields("Readiness", {OPERATIONAL: "status schema_version"}),
    entry("response:checkLiveness", OPERATIONAL),
]

DATASETS = [
    *fields("DatasetOut", {
        PUBLIC_INPUT: "id name public created_at schema schema_hash state data_erased_at",
        PUBLIC_BY_CONVENTION: "rows training_rows holdout_rows calibration_rows evaluation_rows",
    }),
    entry("DatasetOut.ignored_columns", PUBLIC_INPUT, "names of columns in an upload's "
          "header that its schema ignores: the caller's own header, no value of any row"),
    entry("DatasetOut.imputed", Release.INTAKE,
          "exact counts of values imputed in an upload: served only to admins and data "
          "stewards, who hold the table; null for every other role"),
    *fields("SourceOut", {PUBLIC_INPUT: "kind datasets", PUBLIC_BY_CONVENTION: "n_rows"}),
    entry("SourceOut.seed", PUBLIC_INPUT,
          "the request's generator seed; it regenerates every synthetic row, so only admins "
          "and data stewards see it"),
    *fields("BudgetOut", {PUBLIC_INPUT: "epsilon delta filter_order"}),
    *fields("DatasetPage", {PUBLIC_INPUT: PAGE}),
    *fields("UploadOut", {PUBLIC_INPUT: "id dataset_id media_type created_at"}),
    *fields("UploadOut", {Release.INTAKE: "state finished_at size_bytes sha256 problem"},
            note="exact facts of a steward's own file: its size and SHA-256, whether and when "
            "it passed its checks, and a failed ingest's problem (its rows and columns): "
            "served only to admins and data stewards, who hold it"),
]

LEDGER_VIEWS = [
    *fields("DatasetPrivacyReport", {PUBLIC_INPUT: "dataset_id dataset_name public privacy_unit "
                                                   "rows_erased_at erasure"}),
    *fields("Budget", {PUBLIC_INPUT: "epsilon delta limited"}),
    *fields("Spend", {LEDGER: "epsilon epsilon_text non_private composition naive_sum_epsilon "
                              "naive_sum_epsilon_text saved_by_composition_epsilon accountant "
                              "composition_cost_epsilon composition_note filter_rdp "
                              "filter_rdp_bound figures_note"}),
    *fields("Remaining", {LEDGER: "epsilon"}),
    *fields("LedgerEntryView", {LEDGER: "id job_id status mechanism non_private noise_multiplier "
                                        "sample_rate steps committed_steps charged_steps "
                                        "remainder_released clip_norm delta accountant "
                                        "epsilon_text filter_rdp created_at updated_at"}),
    *fields("EpsilonByAccountant", {LEDGER: "rdp pld prv"}),
    *fields("ReleaseRef", {LEDGER: "kind href", (LEDGER, PUBLIC_INPUT): "words"},
            note="an entry's release named from its ids and its request's public plan (models, "
            "candidates, rounds), never from what it found"),
    *fields("TimelinePointView", {LEDGER: "entry_id job_id at entry_epsilon composed_epsilon "
                                          "naive_epsilon non_private composed_epsilon_text"}),
    *fields("ChainVerification", {LEDGER: "dataset_id valid budget_anchored records head_hash"}),
    *fields("InvalidRecord", {LEDGER: "id seq reason"}),
]

JOBS = [
    *fields("JobOut", {PUBLIC_INPUT: "id kind dataset_id training model_id created_at",
                       OPERATIONAL: "status started_at finished_at"}),
    *fields("JobPrivacyOut", {LEDGER: "target_epsilon noise_multiplier delta sample_rate steps "
                                      "max_grad_norm epsilon_planned"}),
    *fields("ProgressOut", {LEDGER: "epoch epochs epsilon_spent"}),
    *fields("ErrorOut", {(OPERATIONAL, AUDIT): "code message"},
            note="an error code and the exception's type name; an audit's alarm quotes its "
            "epsilons"),
    *fields("JobPage", {PUBLIC_INPUT: PAGE}),
    *fields("JobStatusOut", {PUBLIC_INPUT: "id kind dataset_id model_id created_at href",
                             OPERATIONAL: "status started_at finished_at"}),
]

JOB_REPORT = [
    *fields("JobPrivacyReport", {
        PUBLIC_INPUT: "job_id dataset_id dataset_name privacy_unit metrics_note rows_erased_at",
        OPERATIONAL: "status",
        PUBLIC_BY_CONVENTION: "dataset_rows training_rows holdout_rows",
        LEDGER: "mechanism non_private sampling sample_rate expected_batch_size "
                "noise_multiplier clip_norm clipping steps steps_per_epoch epochs "
                "epochs_completed delta target_epsilon epsilon_text epsilon_spent filter_rdp",
        (LEDGER, PUBLIC_BY_CONVENTION, DP_CALIBRATION): "statement",
    }),
    *fields("Accountants", {PUBLIC_INPUT: "reported composition"}),
    *fields("EpochEpsilon", {LEDGER: "epoch pld prv rdp"}),
    *fields("Coverage", {PUBLIC_INPUT: "covers does_not_cover"}),
    *fields("PrivacyTerms", {PUBLIC_INPUT: "neighbouring_relation parts filter noise_source",
                             LEDGER: "filter_order"}),
    *fields("ModelCard", {PUBLIC_INPUT: "outcome caveats erasure"}),
    *fields("IntendedUse", {PUBLIC_INPUT: "purpose users decision_support_not_diagnosis "
                                          "out_of_scope"}),
    *fields("TrainingData", {
        PUBLIC_INPUT: "dataset_id dataset_name source synthetic public note rows_erased_at",
        PUBLIC_BY_CONVENTION: "rows training_rows holdout_rows",
    }),
    *fields("HeldOutMetrics", {PUBLIC_INPUT: "note"}),
]

AUDITS = [
    *fields("AuditOut", {
        PUBLIC_INPUT: "id audited_job_id dataset_id request report created_at",
        OPERATIONAL: "status started_at finished_at",
        LEDGER: "accounted_epsilon",
        AUDIT: "audited_epsilon alarm",
    }),
    *fields("AuditSummary", {
        PUBLIC_INPUT: "id audited_job_id dataset_id request report created_at",
        OPERATIONAL: "status started_at finished_at",
        LEDGER: "accounted_epsilon",
        AUDIT: "audited_epsilon alarm",
    }),
    *fields("ReportError", {(OPERATIONAL, AUDIT): "code message"}),
    *fields("app__privacy_audit__schemas__AuditPage", {PUBLIC_INPUT: PAGE}),
    *fields("AuditReport", {
        PUBLIC_INPUT: "audit_id audited_job_id dataset_id dataset_name privacy_unit request "
                      "ledger",
        OPERATIONAL: "status seconds",
        AUDIT: "alarm one_run membership",
        (LEDGER, PUBLIC_BY_CONVENTION): "settings",
        (LEDGER, AUDIT): "statement",
    }),
    *fields("AuditEpsilons", {
        LEDGER: "accounted accounted_text accountant delta non_private",
        AUDIT: "audited audited_text audited_by",
        PUBLIC_INPUT: "confidence",
    }),
    *fields("AttackAUC", {AUDIT: "loss lira"}),
    *fields("AuditLinks", {PUBLIC_INPUT: "audited_job_report dataset_report"}),
]

DECLARED_SCHEMA = [
    *fields("DatasetSchema-Output", {PUBLIC_INPUT: "subgroups id_column id_kind extra_columns"},
            note="the data steward's declaration (public bounds, categories, references, codes), "
            "never a statistic of the rows"),
    *fields("FeatureSpec-Output", {PUBLIC_INPUT: "name kind label unit lower upper model_lower "
                                                 "model_upper categories reference missing"}),
    *fields("SeverityBand-Output", {PUBLIC_INPUT: "from to label"}),
    *fields("Code", {PUBLIC_INPUT: "system code display"}),
    *fields("FeaturePrefetch", {PUBLIC_INPUT: "query path system code"},
            note="where an EHR keeps the feature, as the schema declares it"),
    *fields("Outcome", {PUBLIC_INPUT: "name label positive horizon_days description"}),
    *fields("OutcomeBands", {PUBLIC_INPUT: "low_medium medium_high"},
            note="the declared risk-band policy, never a statistic of the rows"),
    *fields("Attribute", {PUBLIC_INPUT: "name label categories"}),
]

MODELS = [
    *fields("ModelOut", {
        PUBLIC_INPUT: "id active job_id dataset_id kind features band_thresholds created_at "
                      "schema_hash training_rows_erased_at",
        DP_TRAINING: "version artifact_sha256",
    }),
    *fields("PrivacyStatementOut", {
        LEDGER: "epsilon delta accountant epsilon_rdp non_private",
        PUBLIC_INPUT: "unit calibrated",
    }),
    entry("PrivacyStatementOut.statement", (LEDGER, PUBLIC_BY_CONVENTION), STATEMENT_NOTE),
    *fields("ModelPage", {PUBLIC_INPUT: f"{PAGE} active_model_id"}),
    *fields("ActivationOut", {PUBLIC_INPUT: "seq action model_id previous_model_id "
                                            "activated_at"}),
    *fields("ActivationPage", {PUBLIC_INPUT: PAGE}),
]

SCORING = [
    *fields("RiskResult", {DP_TRAINING: "probability log_odds band",
                           PUBLIC_INPUT: "band_thresholds"}),
    *fields("RiskBatchResult", {DP_TRAINING: "probability log_odds band",
                                PUBLIC_INPUT: "band_thresholds id"}),
    *fields("RiskBatchResponse", {PUBLIC_INPUT: "band_thresholds"}),
    *fields("RiskBatchCompact", {PUBLIC_INPUT: "band_thresholds"}),
    *fields("CompactResult", {DP_TRAINING: "probability band", PUBLIC_INPUT: "id"}),
    *fields("CompactContribution", {PUBLIC_INPUT: "feature",
                                    DP_TRAINING: "contribution_probability direction"}),
    *fields("CompactContribution", {PUBLIC_INPUT: "reason"},
            note="the caller's own feature value, put in words"),
    *fields("ContributionOut", {
        PUBLIC_INPUT: "feature label",
        DP_TRAINING: "contribution contribution_probability direction",
    }),
    *fields("ContributionOut", {PUBLIC_INPUT: "value reason"},
            note="the caller's own feature value, echoed (and put in words)"),
    *fields("RiskResult", {PUBLIC_INPUT: "imputed"}, note=IMPUTED_NOTE),
    *fields("RiskBatchResult", {PUBLIC_INPUT: "imputed"}, note=IMPUTED_NOTE),
    *fields("CompactResult", {PUBLIC_INPUT: "imputed"}, note=IMPUTED_NOTE),
    *fields("ContributionOut", {PUBLIC_INPUT: "imputed"}, note=IMPUTED_NOTE),
    *fields("SeverityOut", {PUBLIC_INPUT: "label from to"}),
    *fields("ReferenceOut", {PUBLIC_INPUT: "features note",
                             DP_TRAINING: "log_odds probability"}),
    *fields("ExplanationOut", {PUBLIC_INPUT: "method", DP_TRAINING: "standard_error"},
            note="the method follows the public schema's size; the error is the spread of the "
            "model's own outputs over public coalition orders"),
    *fields("BaseValueOut", {DP_TRAINING: "log_odds probability"}),
    *fields("ModelStatementOut", {
        PUBLIC_INPUT: "id kind dataset_id trained_at unit calibrated",
        DP_TRAINING: "version",
        LEDGER: "epsilon delta accountant epsilon_rdp non_private",
    }),
    entry("ModelStatementOut.statement", (LEDGER, PUBLIC_BY_CONVENTION), STATEMENT_NOTE),
    *fields("ModelRefOut", {PUBLIC_INPUT: "id", DP_TRAINING: "version", LEDGER: "epsilon delta"}),
    entry("response:getFeatureSpec", PUBLIC_INPUT, "the feature spec: public bounds, labels"),
    entry("response:scorePatientFhir", (DP_TRAINING, PUBLIC_INPUT, LEDGER, PUBLIC_BY_CONVENTION),
          "a FHIR RiskAssessment: the model's risk for the caller's patient, the caller's "
          "values as its basis, and the model's statement"),
    entry("response:searchCodeSystems", PUBLIC_INPUT,
          "the service's own code systems (risk bands, card topics, the built-in schema's "
          "features): fixed definitions; a model's schema's by its URL"),
    entry("response:readCodeSystem", PUBLIC_INPUT,
          "one of the service's own code systems: fixed definitions, or the uncoded features "
          "of a stored model's declared schema (names, labels, public bounds)"),
]

CDS_HOOKS = [
    *fields("CdsService", {PUBLIC_INPUT: "hook id title description prefetch "
                                         "usageRequirements"}),
    *fields("FeatureCode", {PUBLIC_INPUT: "feature label prefetch resource path system code "
                                          "display allowed"}),
    *fields("DiagnosisCoding", {PUBLIC_INPUT: "system code display below"}),
    *fields("ServiceExtension", {PUBLIC_INPUT: "dev.dpcrisis.model-id dev.dpcrisis.min-band "
                                               "dev.dpcrisis.not-prefetchable"}),
    *fields("FeedbackReceived", {PUBLIC_INPUT: "received"},
            note="how many feedback items the caller's own request held"),
    *fields("Card", {PUBLIC_INPUT: "uuid", DP_TRAINING: "summary indicator"}),
    entry("Card.detail", (DP_TRAINING, PUBLIC_INPUT, LEDGER, PUBLIC_BY_CONVENTION),
          "the risk and contributions of the caller's patient, with the model's statement"),
    *fields("CardSource", {PUBLIC_INPUT: "label"}),
    *fields("Coding", {PUBLIC_INPUT: "system code display"}),
]

KEYS_AND_AUDIT_LOG = [
    *fields("KeyCreated", {PUBLIC_INPUT: "id name role prefix created_at revoked_at key"}),
    *fields("KeyOut", {PUBLIC_INPUT: "id name role prefix created_at revoked_at"}),
    *fields("KeyPage", {PUBLIC_INPUT: PAGE}),
    *fields("AuditEventOut", {PUBLIC_INPUT: "id at actor role api_key_id action target "
                                            "request_id"}),
    entry("AuditEventOut.detail", (PUBLIC_INPUT, PUBLIC_BY_CONVENTION, LEDGER, Release.INTAKE),
          "the action's request (budgets, targets, thresholds), a registration's n_rows, a "
          "ledger check's result, how many patients a scoring call scored (never a value); "
          "an upload's row count; its imputed counts and the SHA-256 of the clinic's file are "
          "intake facts served only to admins and data stewards, who hold the table (withheld "
          "from privacy officers, who see their names under 'withheld')"),
    *fields("app__auth__schemas__AuditPage", {PUBLIC_INPUT: PAGE}),
]

INVENTORY_ITSELF = [
    *fields("ReleaseInventory", {PUBLIC_INPUT: "rule"}),
    *fields("ReleaseKindOut", {PUBLIC_INPUT: "kind mechanism places"}),
    *fields("InventoryEntryOut", {PUBLIC_INPUT: "where releases note see"}),
]

PAGES = [
    see("response:getJobPrivacyReport:html", "template:job.html"),
    see("response:getDatasetPrivacyReport:html", "template:dataset.html"),
    see("response:getAuditReport:html", "template:audit.html"),
    see("response:getModelMonitoring:html", "template:monitoring.html"),
]

API_ENTRIES: list[Entry] = [
    *PROBLEMS, *DATASETS, *DECLARED_SCHEMA, *LEDGER_VIEWS, *JOBS, *HELD_OUT, *AUDIT_RESULTS,
    *JOB_REPORT, *AUDITS, *MODELS, *SCORING,
    *CDS_HOOKS, *KEYS_AND_AUDIT_LOG, *INVENTORY_ITSELF, *PAGES,
]
