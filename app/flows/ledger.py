"""The ledger's step that crosses domains: verify a dataset's hash chain and record who did.

The route (``app.api.ledger``) calls it and returns.
"""

from sqlalchemy.orm import Session

from app.auth import audit
from app.auth.audit import Action
from app.auth.principal import Principal
from app.datasets import service as dataset_service
from app.ledger import service as ledger_service
from app.ledger.schemas import ChainVerification


def verify(*, session: Session, dataset_id: int, principal: Principal) -> ChainVerification:
    """Recompute the dataset's ledger hash chain, name the first record that breaks it, and
    record the verification (its outcome and head hash) in the audit log.

    Raises:
        DatasetNotFound.
    """
    dataset = dataset_service.get(session=session, dataset_id=dataset_id)
    result = ChainVerification.model_validate(
        ledger_service.verify_chain(session=session, dataset=dataset)
    )
    audit.record(session=session, principal=principal, action=Action.LEDGER_VERIFIED,
                 target=f"dataset/{dataset.id}",
                 detail={"valid": result.valid, "records": result.records,
                         "head_hash": result.head_hash})
    return result
