"""Statistics releases as the dataset privacy report lists them, beside the training jobs.

Each release is summarised from its stored request and its ledger entry: the mechanism, the
target, the release's own epsilon and its queries in words. The answers themselves stay at
``/v1/statistics/{id}``; the ledger entries and the cumulative spend already include the
release's charge (``app.ledger.spend``).
"""

from typing import Any

from sqlalchemy.orm import Session

from app.privacy.figures import epsilon_text
from app.reports.schemas import StatisticsReleaseSummary
from app.statistics import service as statistics_service
from app.statistics.models import StatisticsRelease
from app.statistics.views import release_epsilon


def _edges(edges: list[float]) -> str:
    return "[" + ", ".join(f"{e:g}" for e in edges) + "]"


def _grouping(item: Any) -> str:
    if isinstance(item, str):
        return item
    return f"{item['feature']} in bins {_edges(item['bins'])}"


def query_text(query: dict[str, Any]) -> str:
    """A query in words, e.g. 'mean of num_sessions by sex, age in bins [18, 30, 65, 81]'."""
    kind = query["kind"]
    text = kind if query.get("feature") is None else f"{kind} of {query['feature']}"
    if query.get("bins"):
        text += f" in bins {_edges(query['bins'])}"
    if query.get("by"):
        text += " by " + ", ".join(_grouping(item) for item in query["by"])
    return text


def summary(session: Session, row: StatisticsRelease, root_path: str = ""
            ) -> StatisticsReleaseSummary:
    entry = statistics_service.ledger_entry(session=session, release_id=row.id)
    epsilon = release_epsilon(entry)
    return StatisticsReleaseSummary(
        id=row.id, href=f"{root_path}/v1/statistics/{row.id}", created_at=row.created_at,
        mechanism=row.mechanism, target_epsilon=row.target_epsilon, delta=row.delta,
        epsilon=epsilon, epsilon_text=epsilon_text(epsilon), rows=row.rows,
        queries=[query_text(q) for q in row.request.get("queries", [])],
        cells=sum(len(a.get("cells", [])) for a in row.answers),
        ledger_entry_id=entry.id if entry is not None else None,
    )


def summaries(*, session: Session, dataset_id: int) -> list[StatisticsReleaseSummary]:
    """The dataset's statistics releases, oldest first (ledger order)."""
    return [summary(session, row)
            for row in statistics_service.list_for_dataset(session=session, dataset_id=dataset_id)]
