"""Shared pagination parameters."""

from typing import Annotated

from fastapi import Query

from app.core.schemas import register_param_range

MAX_LIMIT = 200

Limit = Annotated[
    int, register_param_range("limit", Query(ge=1, le=MAX_LIMIT, description="page size"))
]
Offset = Annotated[int, register_param_range("offset", Query(ge=0, description="items to skip"))]
