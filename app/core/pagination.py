"""Shared pagination parameters."""

from typing import Annotated

from fastapi import Query

from app.core.ids import MAX_ID
from app.core.schemas import register_param_range

MAX_LIMIT = 200

Limit = Annotated[
    int, register_param_range("limit", Query(ge=1, le=MAX_LIMIT, description="page size"))
]
# No table has more rows than ids (past 2**63 SQLite's OFFSET overflows into a 500).
Offset = Annotated[
    int, register_param_range("offset", Query(ge=0, le=MAX_ID, description="items to skip"))
]
