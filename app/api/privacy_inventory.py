"""The release inventory API: what leaves the service, and the mechanism that releases it."""

from fastapi import APIRouter, Request

from app.auth.dependencies import require_roles
from app.auth.models import ROLES
from app.core.json_body import JsonRoute
from app.privacy.annotations import annotated_entries
from app.privacy.inventory import Inventory, ReleaseInventory

router = APIRouter(prefix="/v1/privacy", tags=["privacy"], route_class=JsonRoute)


def served_inventory(openapi: dict[str, object]) -> Inventory:
    """The inventory modules' entries joined with the fields the schemas annotate, read from
    the app's OpenAPI document (the domains sit above ``app.privacy``: it cannot import them)."""
    return Inventory(annotated_entries(openapi))


@router.get("/inventory", dependencies=[require_roles(*ROLES)])
def get_release_inventory(request: Request) -> ReleaseInventory:
    """Every response field, report-page variable, log field and metric, each with the kinds
    of release it is made of and their mechanisms (``app/privacy/inventory.py``, and the
    response schemas' ``x-release`` annotations)."""
    return served_inventory(request.app.openapi()).document()
