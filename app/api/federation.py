"""Federation API: thin routes over app.flows.federation.

A clinic's part in a federation is a job of kind ``federated`` on its own queue: follow it at
``/v1/jobs/{id}``, cancel it like any job; its model lands in this clinic's registry.
"""

from typing import Annotated

from fastapi import APIRouter, Response, status

from app.auth.dependencies import require_roles
from app.auth.principal import Principal
from app.core.database import SessionDep
from app.core.ids import FederationIdPath
from app.core.json_body import JsonRoute
from app.core.openapi import problems
from app.federation.schemas import FederationCreate, FederationJoin, FederationOut
from app.flows import federation as federation_flow
from app.jobs.schemas import JobOut

router = APIRouter(tags=["federations"], route_class=JsonRoute)
READERS = require_roles("data_steward", "data_scientist", "privacy_officer")
Admin = Annotated[Principal, require_roles()]
Steward = Annotated[Principal, require_roles("data_steward")]


@router.post("/v1/federations", status_code=status.HTTP_201_CREATED, responses=problems(422))
def declare_federation(body: FederationCreate, session: SessionDep, response: Response,
                       principal: Admin) -> FederationOut:
    """Declare a federation this service coordinates or takes part in (an admin's decision)."""
    federation = federation_flow.declare(session=session, request=body, principal=principal)
    response.headers["Location"] = f"/v1/federations/{federation.id}"
    return federation


@router.get("/v1/federations/{federation_id}", dependencies=[READERS])
def get_federation(federation_id: FederationIdPath, session: SessionDep) -> FederationOut:
    """The federation as declared, and the coordinator's report of its rounds."""
    return federation_flow.view(session=session, federation_id=federation_id)


@router.post("/v1/federations/{federation_id}/join", status_code=status.HTTP_202_ACCEPTED,
             responses=problems(404, 409, 422))
def join_federation(federation_id: FederationIdPath, body: FederationJoin, session: SessionDep,
                    response: Response, principal: Steward) -> JobOut:
    """Take part with one of this clinic's datasets (a data steward's decision): queue this
    clinic's part and reserve its whole plan on the dataset's ledger (409 if it does not fit)."""
    job = federation_flow.join(session=session, federation_id=federation_id, request=body,
                               principal=principal)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return job
