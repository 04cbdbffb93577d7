"""Shared pagination parameters."""

from typing import Annotated

from fastapi import Query

from app.core.schemas import ALLOWED_RANGES

MAX_LIMIT = 200
ALLOWED_RANGES.update({"limit": f"[1, {MAX_LIMIT}]", "offset": "[0, inf)"})

Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="page size")]
Offset = Annotated[int, Query(ge=0, description="items to skip")]
