"""The release inventory of what an HTTP response carries beside its schemas' annotated fields.

Response fields name their release on their schemas (``app.privacy.annotations``); this module
classifies the rest: fields of the models ``app.core`` shares (``Problem``, a list's ``Page``:
that package sits below this one, so they cannot carry ``Released``), response bodies that are
no component (``response:<operationId>``, another media type's rendering of a JSON answer
included), report pages (classified by their templates), the objects whose keys the document
leaves open (``OPEN_OBJECTS``), an error body's extra members and response headers.

An error leaves as RFC 9457 problem+json (``app.core.errors``): the ``Problem`` component's
members, plus what an error adds: the keywords of
``DomainError(detail, field=..., **extra)`` and of its subclasses' constructors, the handlers'
error lists, a 413's limit. ``tests/privacy/test_inventory_problems.py`` scans app/ and worker/
for every member any error can carry and fails on one without a ``problem:<member>`` entry (an
object member's keys as ``problem:<member>.<key>``), on a ``**mapping`` whose keys it cannot
read, and on an entry that no error carries any more.

A response header is either standard HTTP (``STANDARD_HEADERS``: protocol semantics, no figure
of any record) or has a ``header:<Name>`` entry; ``tests/privacy/test_inventory_headers.py``
scans app/ for every header set on a response.
"""

from app.privacy.releases import Entry, Release, entry, fields, see

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
OPERATIONAL = Release.OPERATIONAL
PUBLIC_BY_CONVENTION = Release.PUBLIC_BY_CONVENTION
DP_TRAINING = Release.DP_TRAINING
SCORE = (DP_TRAINING, PUBLIC_INPUT, LEDGER)

PAGES = ("DatasetPage", "JobPage", "ModelPage", "ActivationPage", "KeyPage", "StatisticsPage",
         "app__auth__schemas__AuditPage", "app__privacy_audit__schemas__AuditPage")

CORE_FIELDS = [
    *fields("Problem", {(PUBLIC_INPUT, LEDGER): "type title status detail instance"},
            note="errors about the request; each extra member is enumerated in the entries "
            "problem:<member> (inventory_http)"),
    *fields("FieldProblem", {PUBLIC_INPUT: "field", (PUBLIC_INPUT, LEDGER): "message allowed"},
            note="a budget below spend quotes the ledger's spend"),
    *(e for page in PAGES for e in fields(page, {PUBLIC_INPUT: "total limit offset"})),
]

BODIES = [
    entry("response:checkLiveness", OPERATIONAL),
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
    # Other media types (app.formats): a FHIR RiskAssessment or a CSV row carries the fields of
    # the JSON answer it renders, so it releases what they do, and nothing more.
    entry("response:scorePatient", SCORE,
          "the answer as a FHIR RiskAssessment or CSV (Accept): RiskResult's fields"),
    entry("response:scorePatients", SCORE,
          "the answers as CSV rows (Accept): RiskBatchResult's fields"),
    see("response:getJobPrivacyReport:html", "template:job.html"),
    see("response:getDatasetPrivacyReport:html", "template:dataset.html"),
    see("response:getAuditReport:html", "template:audit.html"),
    see("response:getModelMonitoring:html", "template:monitoring.html"),
]

OPEN_OBJECTS: dict[str, str] = {
    "UploadOut.problem": "a failed upload's problem+json, whose members are classified as "
    "an error body's (problem:<member>)",
    # Request echoes and declarations: the caller's (or a steward's) own input.
    "JobOut.training": "the job's training request as submitted (and its defaults)",
    "JobOut.payload": "the kind's payload as submitted (ids, a federation's declarations)",
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


BUDGET_409 = "a refused release's 409 (app.ledger.service.over_budget)"


def _members(by_kind: dict[Release | tuple[Release, ...], str], note: str = "") -> list[Entry]:
    return [entry(f"problem:{name}", kinds, note)
            for kinds, names in by_kind.items() for name in names.split()]


PROBLEM_MEMBERS = [
    *_members({PUBLIC_INPUT: "error_count complete"},
              "how many errors the request (or the caller's uploaded table) has, and whether "
              "reading stopped early: added by the handlers with the errors list"),
    entry("problem:total", PUBLIC_INPUT,
          "how many places the uploader's own table breaks its schema (invalid-table 422)"),
    entry("problem:allowed", (PUBLIC_INPUT, LEDGER),
          "the accepted range or values; a budget below spend quotes the ledger's spend"),
    entry("problem:missing", PUBLIC_INPUT,
          "features a CDS Hooks request's prefetch lacks (names from the public schema)"),
    entry("problem:offset", PUBLIC_INPUT, "where in the caller's own body it stops parsing"),
    entry("problem:state", OPERATIONAL,
          "the dataset's lifecycle state (awaiting data, uploading, ready, erased)"),
    entry("problem:max_bytes", PUBLIC_INPUT, "the configured request size limit (413)"),
    *_members({PUBLIC_BY_CONVENTION: "rows training_rows calibration_rows evaluation_rows"},
              "a dataset's (or an upload's) row counts, whole and per part, in a "
              "dataset-too-small 422 (app.jobs.size_floor)"),
    *_members({(PUBLIC_INPUT, LEDGER): "minimum_rows minimum_training_rows"},
              "the size floor a job needs: a public rule of the schema's inputs, epsilon and "
              "delta (app.jobs.size_floor)"),
    *_members({Release.INTAKE: "existing_dataset_id existing_dataset"},
              "the dataset a registration collides with: an answer from its rows (equality), "
              "served only on the routes of data stewards and admins, who hold the tables"),
    *_members({PUBLIC_INPUT: "budget.epsilon budget.delta requested.epsilon requested.delta"},
              "the dataset's configured budget, or the budget a PUT asked for"),
    *_members({LEDGER: "spent_epsilon remaining_epsilon largest_fitting_target_epsilon "
                       "job_epsilon composed_epsilon_with_job release_epsilon "
                       "composed_epsilon_with_release accountant filter.order budget_scope"},
              BUDGET_409 + ": spend, what remains and what fits, from the ledger's mechanism "
              "parameters"),
    *_members({PUBLIC_INPUT: "budget requested filter filter.kind filter.citation"},
              "objects of the 409s (keys listed as problem:<member>.<key>), the filter's kind "
              "and its published proof"),
]

STANDARD_HEADERS = frozenset({
    "allow", "cache-control", "connection", "content-disposition", "content-encoding",
    "content-language", "content-length", "content-location", "content-range",
    "content-security-policy",
    "content-type", "date", "etag", "expires", "last-modified", "link", "location", "pragma",
    "referrer-policy", "retry-after", "server", "strict-transport-security", "vary",
    "www-authenticate", "x-content-type-options", "x-frame-options", "accept-ranges",
})
"""Standard HTTP response headers (lower case), plus ``Access-Control-*`` (CORS): protocol
semantics, set from routes, configuration and constants (a created resource's id in
``Location``, a fixed ``Retry-After``), never from a record. Any other header needs an entry."""
STANDARD_PREFIXES = ("access-control-",)

HEADERS = [
    entry("header:X-Request-ID", PUBLIC_INPUT,
          "the caller's own request id echoed (a safe token), else a fresh random one"),
    entry("header:Idempotency-Replayed", PUBLIC_INPUT,
          "true when the caller's own Idempotency-Key (per API key) named a resource it "
          "created before"),
    entry("header:Preference-Applied", PUBLIC_INPUT,
          "the caller's own Prefer: wait=N echoed (capped by configuration) on an upload's "
          "answer"),
]


def standard_header(name: str) -> bool:
    low = name.lower()
    return low in STANDARD_HEADERS or low.startswith(STANDARD_PREFIXES)


HTTP_ENTRIES: list[Entry] = [*CORE_FIELDS, *BODIES, *PROBLEM_MEMBERS, *HEADERS]
