"""Scoring's steps that cross domains: score (the JSON, FHIR or CDS Hooks way), then record
the call in the audit log before the answer leaves, and count what was served
(``app.observability.served_scores``: bands and probabilities by model id, nothing else).

The event names the endpoint, the model and the number of patients, never a feature
(``audit.record_scoring``, which blocks until the event is committed: call these from a worker
thread). The routes (``app.api.scoring``, ``app.api.fhir``, ``app.api.cdshooks``) call one of
these and render its answer.
"""

from datetime import date, datetime
from typing import Any

import numpy as np

from app.auth import audit
from app.auth.principal import Principal
from app.bands import band_index
from app.cdshooks import service as cds_service
from app.cdshooks.schemas import CdsResponse, HookRequest
from app.fhir import service as fhir_service
from app.fhir.schemas import RiskFhirRequest
from app.observability import served_scores
from app.scoring import service as scoring_service
from app.scoring.answer import RiskAnswer
from app.scoring.schemas import RiskBatchRequest, RiskRequest, RiskResult


def _count_served(scored: RiskResult | RiskAnswer) -> None:
    """The one place an answer is counted in the served-score series: its model id, each
    patient's probability and band (a batch in one vectorised call)."""
    if isinstance(scored, RiskResult):
        served_scores.record(scored.model.id, [scored.probability], [scored.band])
        return
    p = np.asarray(scored.probability, dtype=np.float64)
    served_scores.record(scored.model.id, p, band_index(p, scored.band_thresholds))


def score(*, request: RiskRequest, principal: Principal) -> RiskAnswer:
    """Score one patient and record the call; the typed answer (n = 1) every format renders.

    Raises:
        ModelNotFound (404), a conflict (409), or the features' validation errors (422).
    """
    answer = scoring_service.score_batch(patients=[request.features],
                                         model_id=request.model_id,
                                         at=scoring_service.single_path)
    audit.record_scoring(principal=principal, endpoint="risk", patients=1,
                         model_id=answer.model.id)
    _count_served(answer)
    return answer


def score_batch(*, request: RiskBatchRequest, principal: Principal) -> RiskAnswer:
    """Score 1 to 10,000 patients (results in request order) and record the call once."""
    answer = scoring_service.score_batch(patients=[p.features for p in request.patients],
                                         ids=[p.id for p in request.patients],
                                         model_id=request.model_id)
    audit.record_scoring(principal=principal, endpoint="risk/batch",
                         patients=len(request.patients), model_id=answer.model.id)
    _count_served(answer)
    return answer


def assess_fhir(*, request: RiskFhirRequest, principal: Principal, now: datetime
                ) -> dict[str, Any]:
    """Score one patient, record the call, and answer a FHIR R4 RiskAssessment (never
    stored)."""
    scored, model = fhir_service.assess(features=request.features, model_id=request.model_id,
                                        references=request.basis)
    audit.record_scoring(principal=principal, endpoint="risk/fhir",
                         patients=1, model_id=scored.model.id)
    _count_served(scored)
    return fhir_service.risk_assessment(
        scored=scored, model=model, subject=request.subject, features=request.features,
        references=request.basis, now=now,
    )


def call_cds_service(*, service_id: str, request: HookRequest, principal: Principal,
                     today: date) -> CdsResponse:
    """Answer a patient-view hook with cards, recording the call and counting the served score
    when a patient was scored, whether or not their band earned a card (an insufficient-data
    card scores nobody and records nothing; a refused call raises before either)."""
    answer, scored = cds_service.evaluate(
        service_id=service_id, hook=request.hook,
        patient_id=request.context.patientId, prefetch=request.prefetch, today=today,
        min_band=None if request.extension is None else request.extension.min_band,
    )
    if scored is not None:
        audit.record_scoring(principal=principal, endpoint="cds-services",
                             patients=1, model_id=scored.model.id)
        _count_served(scored)
    return answer
