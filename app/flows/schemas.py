"""Which declared schema a client should build a request from: a model's or a dataset's."""

from app.core.database import get_database
from app.datasets import parts as dataset_parts
from app.datasets import service as dataset_service
from app.datasets.schema.dataset_schema import DatasetSchema
from app.registry import service as registry_service


def schema_for(*, model_id: int | None, dataset_id: int | None) -> DatasetSchema | None:
    """The named model's schema (what it scores), else the named dataset's, else the active
    model's; None when nothing is named and no model is active.

    Raises:
        ModelNotFound, DatasetNotFound: the one named does not exist (404).
    """
    with get_database().session_scope() as session:
        if model_id is not None:
            return registry_service.schema_of(registry_service.get(session=session,
                                                                   model_id=model_id))
        if dataset_id is not None:
            return dataset_parts.schema_of(dataset_service.get(session=session,
                                                               dataset_id=dataset_id))
        active_id = registry_service.active_id(session=session)
        if active_id is None:
            return None
        return registry_service.schema_of(registry_service.get(session=session,
                                                               model_id=active_id))
