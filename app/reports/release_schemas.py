"""What a ledger entry's spend paid for, as the privacy reports name it
(``app.reports.release_names`` builds it): an auditor reads the ledger without the database."""

from enum import StrEnum

from pydantic import Field

from app.core.schemas import ResponseModel


class ReleaseKind(StrEnum):
    """The kinds of release a ledger entry can charge (an audit is listed for completeness: it
    runs on public datasets only and charges nothing)."""

    TRAINING = "training"
    SEARCH = "search"  # a training job's hyper-parameter search, charged whole
    MONITORING = "monitoring"
    COMPARISON = "comparison"
    AUDIT = "audit"
    STATISTICS = "statistics"
    FEDERATION = "federation"  # this clinic's part in a federation's rounds


class ReleaseRef(ResponseModel):
    """A release in words and by link, from public facts of it alone (ids, kind, model ids, a
    search's planned candidates, a federation's planned rounds): never what it found."""

    kind: ReleaseKind
    words: str = Field(description="the release in words, e.g. 'monitoring run 15 of model 3'")
    href: str = Field(description="the release in the API (rooted like the report's other "
                      "links)")
