"""Field types every report model shares (``app.reports.schemas``, ``patient_schemas``)."""

from datetime import datetime
from typing import Annotated

from pydantic import Field, PlainSerializer, WithJsonSchema

from app.core.schemas import UtcDatetime

ReportDatetime = Annotated[
    UtcDatetime,
    PlainSerializer(datetime.isoformat, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A UTC timestamp written with ``+00:00`` (pydantic would write ``Z``)."""

Epsilon = Annotated[float | None, Field(description="null: infinite (non-private)")]
