"""Model families: each model kind behind one interface (``base.Family``) and one registry.

Read ``docs/families.md`` for how to add one.
"""

from app.families.base import DP_SGD, Family, PlanRefused, ReleasePlan, ReleaseRequest
from app.families.registry import (
    DEFAULT_FAMILY,
    UnknownFamily,
    create_family,
    family_names,
    family_of,
    family_of_network,
    legacy_family_of,
    register_family,
    unregister_family,
)

__all__ = [
    "DEFAULT_FAMILY",
    "DP_SGD",
    "Family",
    "PlanRefused",
    "ReleasePlan",
    "ReleaseRequest",
    "UnknownFamily",
    "create_family",
    "family_names",
    "family_of",
    "family_of_network",
    "legacy_family_of",
    "register_family",
    "unregister_family",
]
