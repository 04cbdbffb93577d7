"""The release inventory of what leaves other than response bodies: the report pages' template
variables, the structured log fields and the values formatted into log messages, and the
Prometheus metric families.

A page variable that is a report model (``report``) points at its response schema, where each
field is classified; the others are values ``app.reports`` prepares for the page.
"""

from app.privacy.releases import Entry, Release, entry, see

PUBLIC_INPUT = Release.PUBLIC_INPUT
DP_EVALUATION = Release.DP_EVALUATION
DP_STATISTICS = Release.DP_STATISTICS
LEDGER = Release.LEDGER
PUBLIC_BY_CONVENTION = Release.PUBLIC_BY_CONVENTION
AUDIT = Release.AUDIT
OPERATIONAL = Release.OPERATIONAL
DP_TRAINING = Release.DP_TRAINING


def _page(template: str, variables: dict[str, Release | tuple[Release, ...]]) -> list[Entry]:
    return [entry(f"template:{template}:{name}", kinds) for name, kinds in variables.items()]


TEMPLATES = [
    *_page("base.html", {"title": PUBLIC_INPUT}),
    see("template:job.html:report", "JobPrivacyReport"),
    *_page("job.html", {
        "title": PUBLIC_INPUT,
        "dataset": PUBLIC_INPUT,
        "infinity": PUBLIC_INPUT,
        "delta": LEDGER,
        "page_facts": (PUBLIC_INPUT, PUBLIC_BY_CONVENTION, LEDGER),
        "plot": LEDGER,
        "epoch_table": LEDGER,
        "card.use": PUBLIC_INPUT,
        "card.data_facts": (PUBLIC_INPUT, PUBLIC_BY_CONVENTION),
        "card.data_note": PUBLIC_INPUT,
        "card.metrics": DP_EVALUATION,
        "card.metrics_note": PUBLIC_INPUT,
        "card.caveats": PUBLIC_INPUT,
        "card.erasure": PUBLIC_INPUT,
        "figures_note": LEDGER,
    }),
    see("template:dataset.html:report", "DatasetPrivacyReport"),
    *_page("dataset.html", {
        "name": PUBLIC_INPUT,
        "budget": PUBLIC_INPUT,
        "spent": LEDGER,
        "page_facts": (PUBLIC_INPUT, LEDGER),
        "plot": LEDGER,
        "timeline_table": (PUBLIC_INPUT, LEDGER),
        "entries_table": (PUBLIC_INPUT, LEDGER),
        "audits_table": (PUBLIC_INPUT, OPERATIONAL, LEDGER, AUDIT),
        "patient_facts": (PUBLIC_INPUT, LEDGER),
        "blocks_table": (PUBLIC_INPUT, LEDGER, Release.INTAKE),
        "block_timeline_table": (PUBLIC_INPUT, LEDGER),
    }),
    see("template:audit.html:report", "AuditReport"),
    *_page("audit.html", {
        "title": PUBLIC_INPUT,
        "headline.accounted": LEDGER,
        "headline.audited": AUDIT,
        "headline.delta": LEDGER,
        "headline.confidence": PUBLIC_INPUT,
        "error": (OPERATIONAL, AUDIT),
        "audit_facts": (PUBLIC_INPUT, OPERATIONAL, AUDIT),
        "one_run_table": AUDIT,
        "attack_table": AUDIT,
        "plot": AUDIT,
        "roc_table": AUDIT,
    }),
    see("template:monitoring.html:timeline", "MonitoringTimeline"),
    *_page("monitoring.html", {
        "title": PUBLIC_INPUT,
        "runs": (PUBLIC_INPUT, OPERATIONAL, DP_EVALUATION),
        "features": (PUBLIC_INPUT, DP_EVALUATION, DP_STATISTICS),
    }),
]

LOG_FIELDS = [
    entry("log:time", OPERATIONAL),
    entry("log:level", OPERATIONAL),
    entry("log:logger", OPERATIONAL),
    entry("log:message", (OPERATIONAL, PUBLIC_INPUT, AUDIT),
          "a fixed text with the log-arg: values below; access lines name only the method, "
          "path and status (patient features travel in bodies, which nothing logs)"),
    entry("log:request_id", PUBLIC_INPUT),
    entry("log:job_id", PUBLIC_INPUT),
    entry("log:worker_id", OPERATIONAL),
    entry("log:exc_info", OPERATIONAL,
          "a traceback: code lines and the exception's message (library text, not checked "
          "for values)"),
]

_ARGUMENTS: dict[str, tuple[Release, str]] = {
    "job_id": (PUBLIC_INPUT, ""),
    "claimed.job_id": (PUBLIC_INPUT, ""),
    "kind": (PUBLIC_INPUT, "a claimed job's kind that no task handler is registered for"),
    "existing.name": (PUBLIC_INPUT, "an API key's name"),
    "name": (PUBLIC_INPUT, "an API key's name"),
    "signum": (OPERATIONAL, ""),
    "self.worker_id": (OPERATIONAL, ""),
    "self.device": (OPERATIONAL, ""),
    "type(waiter).__name__": (OPERATIONAL, ""),
    "type(exc).__name__": (OPERATIONAL, ""),
    "type(exc.orig).__name__": (OPERATIONAL, ""),
    "spec.world_size": (PUBLIC_INPUT, ""),
    "backend": (OPERATIONAL, ""),
    "outcome": (OPERATIONAL, "the job's (or an upload's) final status"),
    "phase": (OPERATIONAL, "an audit's phase name"),
    "message": (AUDIT, "an audit's privacy-bug alarm, quoting both epsilons"),
    "upload.id": (PUBLIC_INPUT, "an upload's id (its resource's URL)"),
    "len(tokens)": (OPERATIONAL, "how many upload claims of stopped processes a start "
                    "gave back"),
    "len(swept.spools)": (OPERATIONAL, "how many upload spools a start-up sweep removed"),
    "len(swept.tables)": (OPERATIONAL, "how many unreferenced kept tables a sweep removed"),
    "len(swept.models)": (OPERATIONAL, "how many unreferenced model files a sweep removed"),
    "space_id": (OPERATIONAL, "the patient space whose index upkeep (fold, old files) failed"),
    "dataset_id": (PUBLIC_INPUT, "a dataset registered before patient spaces that could not "
                   "join its patients' space at start-up (a fact of its registration)"),
    "moved": (PUBLIC_INPUT, "the datasets registered before patient spaces that joined their "
              "patients' spaces at start-up (facts of their registrations)"),
    "self.stages.clipped": (
        DP_TRAINING, "how many values of a clinic's federated updates (its noisy weights minus "
        "the global ones: post-processing of its DP-SGD release) were clipped for secure "
        "aggregation, in the clinic's own log"),
    "secure_aggregation.UPDATE_RANGE": (PUBLIC_INPUT, "secure aggregation's fixed range"),
    "unsafe": (OPERATIONAL, "why a clinic refused a secure aggregation stage: the counts of "
               "sites and the node ids the coordinator sent, against the clinic's declared "
               "minimum, in the clinic's own log"),
    "server_round": (PUBLIC_INPUT, "a federation round's number, in the coordinator's log"),
    "site": (PUBLIC_INPUT, "the site name an answer to the coordinator gave"),
    "unacceptable": (
        OPERATIONAL, "why the coordinator dropped a site's answer: the public mechanism it "
        "declared (noise, sample rate, steps, delta), the shapes of its weights, or what in its "
        "evaluation (a DP release) is malformed, in the coordinator's log"),
    "silent": (OPERATIONAL, "that a clinic's part ended because the coordinator said nothing "
               "for the federation's declared round timeout, in the clinic's own log"),
    "traceback.format_exc(limit=3)": (
        OPERATIONAL, "a failed job's traceback: code lines and the exception's message (library "
        "text; the job's stored error keeps only the type name)"),
}
LOG_ARGUMENTS = [entry(f"log-arg:{expr}", kinds, note) for expr, (kinds, note) in
                 _ARGUMENTS.items()]

_SERVED_NOTE = ("operational: counts of the service's own answers to scoring requests (JSON, "
                "FHIR and CDS Hooks calls alike), not a statistic of any training or follow-up "
                "table")

METRICS = [
    entry("metric:dpcrisis_jobs", OPERATIONAL, "jobs by status"),
    entry("metric:dpcrisis_dataset_epsilon_spent", LEDGER),
    entry("metric:dpcrisis_dataset_epsilon_remaining", LEDGER),
    entry("metric:dpcrisis_job_queue_wait_seconds", OPERATIONAL),
    entry("metric:dpcrisis_training_samples_per_second", (OPERATIONAL, PUBLIC_BY_CONVENTION),
          "steps * sample rate * training rows / seconds"),
    entry("metric:dpcrisis_metrics_database_up", OPERATIONAL),
    entry("metric:dpcrisis_http_request_duration_seconds", OPERATIONAL,
          "by route template and method (no ids, no bodies)"),
    entry("metric:dpcrisis_http_errors", OPERATIONAL, "by route template, method and status"),
    entry("metric:dpcrisis_served_band", OPERATIONAL, _SERVED_NOTE + ": answers per band, by "
          "model id"),
    entry("metric:dpcrisis_served_score", OPERATIONAL, _SERVED_NOTE + ": served probabilities "
          "by model id, on public bins fixed in code"),
]

# The statistics releases as the privacy report's page shows them (their fields carry their
# classification on ``app.reports.schemas`` and ``app.statistics.schemas``).
STATISTICS_REPORT = [
    entry("template:dataset.html:statistics_table", (PUBLIC_INPUT, PUBLIC_BY_CONVENTION, LEDGER),
          "the statistics releases: requests, targets, epsilons and cell counts (no values)"),
]

# The monitoring page's charts (app.reports.monitoring_plots): post-processing of the releases
# its runs' response fields name (app.monitoring.schemas).
MONITORING_PAGE = [
    entry("template:monitoring.html:reliability", (PUBLIC_INPUT, DP_EVALUATION),
          "the training-time evaluation's and the latest run's reliability bins (public "
          "edges; noisy rows and positives as released, rates their clipped ratio)"),
    entry("template:monitoring.html:drift_plot", (PUBLIC_INPUT, DP_EVALUATION, DP_STATISTICS),
          "each feature's name, PSI, PSI interval and verdict, as FeatureDriftOut"),
    entry("template:monitoring.html:auc_plot", (PUBLIC_INPUT, DP_EVALUATION),
          "each finished run's id, ROC-AUC and interval, and the training-time ROC-AUC its "
          "drift recomputed from the training-time evaluation release"),
]

OUTPUT_ENTRIES: list[Entry] = [*TEMPLATES, *LOG_FIELDS, *LOG_ARGUMENTS, *METRICS,
                               *STATISTICS_REPORT, *MONITORING_PAGE]
