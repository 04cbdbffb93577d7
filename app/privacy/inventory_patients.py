"""The release inventory of the per-patient budget: the organisation's budget, an upload's
overlap with earlier tables, and the dataset report's blocks.

Which blocks exist depends on which patients the organisation's tables share: block sizes,
overlaps and every block's spend (the ledger's functions of mechanism parameters over the
blocks' datasets, as admission computes them) depend on it, so they are ``Release.INTAKE``,
served only to data stewards and admins (docs/privacy.md, "Patient budget").
"""

from app.privacy.releases import Entry, Release, entry, fields

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
INTAKE = Release.INTAKE

UPLOAD_OVERLAP = [
    *fields("PatientOverlapOut", {INTAKE: "patients already_known new shared_with"},
            note="exact counts of an upload's patients known to the organisation's earlier "
            "tables (DatasetOut.patients): served only to admins and data stewards, who hold "
            "the tables; null for others"),
    entry("DatasetOut.warnings", (INTAKE, PUBLIC_INPUT),
          "that the upload's rows equal an earlier dataset's (an equality of private tables): "
          "served only to admins and data stewards; null for others"),
]

ORGANISATION_BUDGET = [  # GET and PUT /v1/patient-budget, GET /v1/patient-budget/verify
    *fields("PatientBudgetOut", {
        PUBLIC_INPUT: "epsilon delta filter_order withheld id_scheme",
        LEDGER: "chain_records chain_head_hash",
    }),
    *fields("PatientBudgetOut", {INTAKE: "spent_epsilon remaining_epsilon"},
            note="the spend of the most-spent live block: it depends on which tables share "
            "patients (which blocks exist), so admins and data stewards only; null for others"),
    *fields("SpaceChainVerification", {LEDGER: "valid budget_anchored records head_hash"}),
]

DATASET_REPORT = [
    *fields("PatientBudgetView", {
        PUBLIC_INPUT: "space epsilon delta filter_order statement withheld",
    }, note="the per-patient budget of the dataset's patient space and its rule in words"),
    *fields("PatientBudgetView", {
        INTAKE: "spent_epsilon spent_epsilon_text remaining_epsilon",
    }, note="the spend of the dataset's most-spent live block of patients: it depends on "
       "which other tables hold them, so admins and data stewards only; null for others"),
    *fields("PatientBlockView", {
        INTAKE: "id datasets created_at closed_at live spent_epsilon spent_epsilon_text",
    }, note="which datasets a block's patients share (a block exists only where patients "
       "are: an exact fact about the tables' id sets, no mechanism; PatientBudgetView.blocks): "
       "admins and data stewards only, who hold the tables; null for others"),
    entry("PatientBlockView.size", INTAKE,
          "a block's exact patient count: admins and data stewards only (null for others)"),
    *fields("BlockPointView", {INTAKE: "entry_id dataset_id at epsilon"},
            note="a block's spend over time (PatientBlockView.timeline): admins and data "
            "stewards only"),
]

PATIENT_ENTRIES: list[Entry] = [*UPLOAD_OVERLAP, *ORGANISATION_BUDGET, *DATASET_REPORT]
