"""Datasets API: thin routes over app.datasets.service."""

from typing import Any

from fastapi import APIRouter, Request, Response, status

from app.core.database import SessionDep
from app.core.idempotency import IdempotencyKey, create_once, replay_headers
from app.core.negotiation import REPORT_RESPONSES, PrefersHtml
from app.core.pagination import Limit, Offset
from app.datasets import service
from app.datasets.schemas import DatasetCreate, DatasetOut, PrivacyBudget
from app.ledger import report as ledger_report
from app.ledger import report_html

router = APIRouter(prefix="/v1/datasets", tags=["datasets"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=DatasetOut)
def create_dataset(
    body: DatasetCreate, session: SessionDep, response: Response,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    """Register a dataset with its privacy budget (``Idempotency-Key`` makes retries safe)."""
    dataset_id, replayed = create_once(
        session=session, route="POST /v1/datasets", key=idempotency_key, body=body,
        create=lambda: service.create(session=session, request=body).id,
    )
    response.headers.update(replay_headers(replayed))
    response.headers["Location"] = f"/v1/datasets/{dataset_id}"
    return service.to_out(service.get(session=session, dataset_id=dataset_id))


@router.get("")
def list_datasets(session: SessionDep, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    """List datasets."""
    rows, total = service.list_page(session=session, limit=limit, offset=offset)
    return {"items": [service.to_out(d) for d in rows], "total": total, "limit": limit,
            "offset": offset}


@router.get("/{dataset_id}", response_model=DatasetOut)
def get_dataset(dataset_id: int, session: SessionDep) -> dict[str, Any]:
    """Read one dataset."""
    return service.to_out(service.get(session=session, dataset_id=dataset_id))


@router.put("/{dataset_id}/privacy-budget", response_model=DatasetOut)
def change_privacy_budget(
    dataset_id: int, body: PrivacyBudget, session: SessionDep
) -> dict[str, Any]:
    """Raise or lower a dataset's budget; 409 if it would fall below what is already spent."""
    dataset = service.get(session=session, dataset_id=dataset_id)
    service.change_budget(session=session, dataset=dataset, budget=body)
    session.commit()
    return service.to_out(dataset)


@router.get("/{dataset_id}/privacy-report", response_model=None, responses=REPORT_RESPONSES)
def dataset_privacy_report(
    dataset_id: int, session: SessionDep, html: PrefersHtml, request: Request, response: Response
) -> dict[str, Any] | Response:
    """Budget, composed spend, remaining budget and the ledger entries (JSON or HTML page)."""
    dataset = service.get(session=session, dataset_id=dataset_id)
    report = ledger_report.dataset_report(session=session, dataset=dataset)
    if html:
        page = report_html.render_dataset_page(
            report, root_path=request.scope.get("root_path", "")
        )
        return report_html.page_response(page)
    response.headers["Vary"] = "Accept"
    return report
