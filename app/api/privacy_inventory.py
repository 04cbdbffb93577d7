"""The release inventory API: what leaves the service, and the mechanism that releases it."""

from fastapi import APIRouter

from app.auth.dependencies import require_roles
from app.auth.models import ROLES
from app.core.json_body import JsonRoute
from app.privacy import inventory
from app.privacy.inventory import ReleaseInventory

router = APIRouter(prefix="/v1/privacy", tags=["privacy"], route_class=JsonRoute)


@router.get("/inventory", dependencies=[require_roles(*ROLES)])
def get_release_inventory() -> ReleaseInventory:
    """Every response field, report-page variable, log field and metric, each with the kinds
    of release it is made of and their mechanisms (``app/privacy/inventory.py``)."""
    return inventory.document()
