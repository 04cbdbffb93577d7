"""Resource ids and offsets as API parameters, bounded by what the database can hold.

Ids are INTEGER columns: on PostgreSQL a number past 2**31 - 1 is a DataError and on SQLite one
past 2**63 - 1 an OverflowError, both 500s if they reach a query. Bounding them here turns an
impossible id into a 422 that names the parameter and its range, on either database.
"""

from typing import Annotated

from fastapi import Path, Query
from pydantic.fields import FieldInfo

from app.core.schemas import register_param_range

MAX_ID = 2**31 - 1
"""The largest id a row can have (PostgreSQL INTEGER)."""


def _path(name: str) -> FieldInfo:
    return register_param_range(name, Path(ge=1, le=MAX_ID))


DatasetIdPath = Annotated[int, _path("dataset_id")]
JobIdPath = Annotated[int, _path("job_id")]
ModelIdPath = Annotated[int, _path("model_id")]
KeyIdPath = Annotated[int, _path("key_id")]
AuditIdPath = Annotated[int, _path("audit_id")]
RunIdPath = Annotated[int, _path("run_id")]
ComparisonIdPath = Annotated[int, _path("comparison_id")]
FederationIdPath = Annotated[int, _path("federation_id")]
UploadIdPath = Annotated[int, _path("upload_id")]
DatasetIdQuery = Annotated[
    int | None, register_param_range("dataset_id", Query(ge=1, le=MAX_ID, description="filter"))
]
