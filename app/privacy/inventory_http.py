"""The release inventory of what leaves in an error body's extra members and in response headers.

An error leaves as RFC 9457 problem+json (``app.core.errors``): the ``Problem`` component's
members (classified in ``inventory_api``), plus what an error adds: the keywords of
``DomainError(detail, field=..., **extra)`` and of its subclasses' constructors, the handlers'
error lists, a 413's limit. ``tests/privacy/test_inventory_problems.py`` scans app/ and worker/
for every member any error can carry and fails on one without a ``problem:<member>`` entry (an
object member's keys as ``problem:<member>.<key>``), on a ``**mapping`` whose keys it cannot
read, and on an entry that no error carries any more.

A response header is either standard HTTP (``STANDARD_HEADERS``: protocol semantics, no figure
of any record) or has a ``header:<Name>`` entry; ``tests/privacy/test_inventory_headers.py``
scans app/ for every header set on a response.
"""

from app.privacy.releases import Entry, Release, entry

PUBLIC_INPUT = Release.PUBLIC_INPUT
LEDGER = Release.LEDGER
OPERATIONAL = Release.OPERATIONAL
PUBLIC_BY_CONVENTION = Release.PUBLIC_BY_CONVENTION

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


HTTP_ENTRIES: list[Entry] = [*PROBLEM_MEMBERS, *HEADERS]
