"""What a ledger entry's spend paid for, as the privacy reports name it
(``app.reports.release_names`` builds it): an auditor reads the ledger without the database."""

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from app.core.schemas import ResponseModel
from app.privacy.annotations import Released
from app.privacy.releases import Release

PLAN_NOTE = ("an entry's release named from its ids and its request's public plan (models, "
             "candidates, rounds), never from what it found")
NAMED = Released(Release.LEDGER, note=PLAN_NOTE)
NAMED_IN_WORDS = Released(Release.LEDGER, Release.PUBLIC_INPUT, note=PLAN_NOTE)


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

    kind: Annotated[ReleaseKind, NAMED]
    words: Annotated[str, NAMED_IN_WORDS] = Field(
        description="the release in words, e.g. 'monitoring run 15 of model 3'")
    href: Annotated[str, NAMED] = Field(
        description="the release in the API (rooted like the report's other links)")
