"""Shared pagination parameters."""

from typing import Annotated

from fastapi import Query

Limit = Annotated[int, Query(ge=1, le=200, description="page size")]
Offset = Annotated[int, Query(ge=0, description="items to skip")]
