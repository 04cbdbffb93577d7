"""The kinds of release, each with the mechanism that lets it leave the trust boundary.

docs/privacy.md, "Release inventory": only DP releases leave, each named in the release
inventory (``app.privacy.inventory``) with its mechanism; exact figures only for datasets marked
public. Every field of every response, report page, metric and log line is classified here as
one of a small closed set of kinds (or several, for a composite such as a sentence quoting an
epsilon and a row count).
"""

from dataclasses import dataclass
from enum import StrEnum


class Release(StrEnum):
    """What a released value is computed from, and so which mechanism covers it."""

    PUBLIC_INPUT = "public_input"
    DP_TRAINING = "dp_training"
    DP_CALIBRATION = "dp_calibration"
    DP_EVALUATION = "dp_evaluation"
    DP_STATISTICS = "dp_statistics"
    LEDGER = "ledger"
    PUBLIC_BY_CONVENTION = "public_by_convention"
    AUDIT = "audit"
    OPERATIONAL = "operational"
    INTAKE = "intake"


MECHANISMS: dict[Release, str] = {
    Release.PUBLIC_INPUT: (
        "Not computed from any record: the caller's own request (the features a clinician "
        "sends for scoring included), configuration, ids, timestamps of API actions, code "
        "constants and texts. Released as is (some, like an API key, are confidential, but "
        "none says anything about the private rows)."
    ),
    Release.DP_TRAINING: (
        "The DP-SGD model: Poisson-subsampled Gaussian mechanism (per-sample clipping to C, "
        "noise sigma * C per step), accounted by PLD and RDP and charged to the ledger (a "
        "hyper-parameter search: the best of a random number of such runs, repeat-and-select "
        "(Papernot and Steinke 2022), accounted by RDP and charged whole); anything "
        "computed from the model and public inputs alone is post-processing (its artifact hash, "
        "a patient's risk, band and Shapley contributions). Noise 0 (non_private: true) only "
        "on a dataset marked public."
    ),
    Release.DP_CALIBRATION: (
        "Platt calibration: one Gaussian release of per-bin counts of rows and of positives "
        "(rows with the model's outcome) in the calibration part (fixed public logit bins, L2 "
        "sensitivity sqrt 2), no costlier than the training at every RDP order: parallel "
        "composition, no extra spend; slope and intercept are post-processing. Exact only on a "
        "public dataset trained non-privately."
    ),
    Release.DP_EVALUATION: (
        "The held-out evaluation: one noisy histogram release on the evaluation part "
        "(Gaussian, parallel composition with the training, no extra spend); every metric is "
        "post-processing of it. Exact only on a public dataset trained non-privately."
    ),
    Release.DP_STATISTICS: (
        "DP cohort statistics (POST /v1/datasets/{id}/statistics): counts, clipped sums and "
        "histogram counts of every record, grouped by public keys and bins from the declared "
        "schema and the request, with Gaussian (zCDP) or Laplace (pure epsilon) noise from "
        "OpenDP's exact samplers at sensitivities from the declared bounds; one request is one "
        "release, charged to the dataset's ledger with each noisy vector's noise multiplier, "
        "admitted by the same filter as the training jobs. Means, prevalences, standard errors "
        "and intervals are post-processing of the noisy vectors."
    ),
    Release.LEDGER: (
        "Functions of public mechanism parameters (noise multiplier, sample rate, steps, clip "
        "norm, delta, budget) and of the ledger's own records: epsilons, spend, remaining "
        "budget, the hash chain. Never a function of a record's values."
    ),
    Release.PUBLIC_BY_CONVENTION: (
        "Row counts of a dataset and of its training, calibration and evaluation parts (each "
        "record's part is a keyed PRF of its id): neighbouring datasets differ by adding or "
        "removing one patient, with the row count treated as public; it sets the sample rate. "
        "Released exactly."
    ),
    Release.AUDIT: (
        "Privacy-audit results: computed on synthetic canaries and on datasets marked public "
        "(synthetic) only, which the audit API and worker enforce; exact, no patient's record "
        "in them."
    ),
    Release.OPERATIONAL: (
        "Service state: latency, queue waits, throughput, job and worker status, timings, error "
        "codes and exception types. No patient data; side channels such as training time are "
        "outside the guarantee."
    ),
    Release.INTAKE: (
        "Exact facts of an uploaded table, computed from its private rows with no mechanism: "
        "counts of imputed values, the SHA-256 of the clinic's file, which registered dataset "
        "a new upload duplicates. Served only to admins and data stewards, who hold the table "
        "itself; every other role gets null, a 403 or the member withheld. Not a DP release, "
        "and never shown to a role that sees data only through DP releases."
    ),
}


@dataclass(frozen=True)
class Entry:
    """One classified place: a response field, an inline response body, an error body's
    member, a response header, a report page's variable, a log field or argument, or a
    Prometheus metric family.

    ``where`` forms:
        ``Schema.field`` (OpenAPI component and property path; a free-form object's sub-key as
        ``Schema.field.key``); ``response:<operationId>`` (a response body that is no
        component); ``problem:<member>[.key]`` (a member an error body adds to ``Problem``);
        ``header:<Name>`` (a response header that is not standard HTTP);
        ``template:<file>:<variable>[.attr...]``; ``log:<field>``;
        ``log-arg:<expression>`` (a value formatted into a log message); ``metric:<name>``.

    ``releases`` names every kind the value is made of (a sentence may quote an epsilon and a
    row count); ``see`` instead points at where it is classified (a page variable that is a
    report model, an HTML body that is a page).
    """

    where: str
    releases: tuple[Release, ...]
    note: str = ""
    see: str = ""


Kinds = Release | tuple[Release, ...]


def _kinds(kinds: Kinds) -> tuple[Release, ...]:
    return (kinds,) if isinstance(kinds, Release) else kinds


def fields(schema: str, by_kind: dict[Kinds, str], note: str = "") -> list[Entry]:
    """Entries for ``schema``'s properties, listed per kind (space-separated names).

    Every property is listed by name, so a property added later is unclassified until someone
    decides what releases it; a property that only refers to another component (a nested
    object, a list of them) is classified in that component.
    """
    return [
        Entry(f"{schema}.{name}", _kinds(kinds), note)
        for kinds, names in by_kind.items()
        for name in names.split()
    ]


def entry(where: str, kinds: Kinds, note: str = "") -> Entry:
    return Entry(where, _kinds(kinds), note)


def see(where: str, target: str, note: str = "") -> Entry:
    """``where`` is classified at ``target`` (a component, or a page template)."""
    return Entry(where, (), note, see=target)
