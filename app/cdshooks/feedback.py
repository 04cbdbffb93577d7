"""CDS Hooks feedback: what clinicians did with the cards (accepted or overridden).

Each item is kept as a ``CdsFeedback`` row: the card's uuid, the outcome and when, the override
reason's coding (``system|code``) and how many suggestions were accepted. The free-text
``userComment`` is not kept: it may name the patient, and nothing here needs it.
"""

from datetime import UTC

from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.cdshooks.models import CdsFeedback
from app.cdshooks.schemas import FeedbackItem, FeedbackRequest


def _reason(item: FeedbackItem) -> str | None:
    reason = item.overrideReason.reason if item.overrideReason is not None else None
    if not reason:
        return None
    return f"{reason.get('system', '')}|{reason.get('code', '')}"[:300]


def record(*, session: Session, principal: Principal, service_id: str,
           feedback: FeedbackRequest) -> int:
    """Add one row per feedback item to ``session`` (committed with the request); how many."""
    for item in feedback.feedback:
        session.add(CdsFeedback(
            service_id=service_id, card=item.card, outcome=item.outcome,
            outcome_at=(item.outcomeTimestamp if item.outcomeTimestamp.tzinfo
                        else item.outcomeTimestamp.replace(tzinfo=UTC)),
            override_reason=_reason(item),
            accepted_suggestions=len(item.acceptedSuggestions or []),
            actor=principal.name[:100], api_key_id=principal.key_id,
        ))
    return len(feedback.feedback)
