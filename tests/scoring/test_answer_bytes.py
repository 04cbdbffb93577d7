"""The typed scoring answer keeps every byte the hand-built answer had.

``legacy_*`` below are the dicts the service built by hand before the answer was one typed
object (kept here as the specification of today's bytes, with the ``imputed`` keys added since:
which features were not given and scored at their reference): the single-patient answer,
FHIR and CDS Hooks read ``RiskAnswer.single()``, and the batch writers cut their text from the
typed views, so each must give exactly what ``json.dumps`` gives for those dicts.
"""

import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from app.datasets.schema.dataset_schema import DatasetSchema
from app.registry.network import build_network
from app.scoring import render
from app.scoring import service as scoring_service
from app.scoring.answer import RiskAnswer, direction_of, explained_value
from app.scoring.model_cache import ScoringModel
from app.scoring.patients import raw_rows
from app.scoring.schemas import TOP_CONTRIBUTIONS, RiskResult
from app.scoring.service import REFERENCE_NOTE, batch_path
from tests.conftest import PATIENT
from tests.scoring.test_risk_batch import assert_additive, random_patients

MIXED = DatasetSchema.model_validate({
    "features": [
        {"name": "dose", "kind": "numeric", "lower": 0, "upper": 2.5, "reference": 0.5,
         "label": "Dose", "unit": "mg"},
        {"name": "site", "kind": "categorical", "categories": ["north", "süd", 'q"uote'],
         "reference": "north"},
        {"name": "flag", "kind": "binary", "reference": 0, "label": "Flag"},
    ],
    "outcome": {"name": "y"},
})
"""A schema with a float bound, a categorical feature (non-ASCII and a quote) and a binary."""
IMPUTING = DatasetSchema.model_validate({
    **MIXED.model_dump(mode="json", by_alias=True),
    "features": [{**f, "missing": "reference"} if f["name"] in ("dose", "site") else f
                 for f in MIXED.model_dump(mode="json", by_alias=True)["features"]],
})
"""``MIXED`` with ``dose`` and ``site`` imputed with their reference when not given."""


def _json(document: Any) -> bytes:
    return json.dumps(document, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode()


def _model(kind: str, schema: DatasetSchema | None = None) -> ScoringModel:
    torch.manual_seed(3)
    row = SimpleNamespace(
        id=7, artifact_sha256=f"{kind}{schema is not None}".ljust(64, "0"),
        band_thresholds={"low_medium": 0.05, "medium_high": 0.2}, kind=kind, dataset_id=1,
        created_at=datetime(2026, 1, 1, tzinfo=UTC), epsilon=2.5, delta=1e-5, accountant="prv",
        epsilon_rdp=2.9, metrics={"calibration": {"rows": 600}},
        schema_json=None if schema is None else schema.model_dump(mode="json", by_alias=True),
        schema_hash=None if schema is None else "mixed",
        # no patient space (as a public dataset's): the statement names no per-patient budget
        patient_space_kind=None, patient_budget_epsilon=None, patient_budget_delta=None,
    )
    model = ScoringModel.of(row)  # type: ignore[arg-type]
    network = build_network(kind, 16, model.encoder.n_inputs).eval()
    scoring_service._cache[model.artifact_sha256] = network
    return model


def _answer(kind: str, schema: DatasetSchema | None, n: int) -> tuple[ScoringModel, RiskAnswer]:
    model = _model(kind, schema)
    if schema is None:
        patients: list[dict[str, Any]] = [PATIENT, *random_patients(n - 1, seed=4)]
    else:
        rng = np.random.default_rng(5)
        patients = [{"dose": float(rng.uniform(0, 2.5)), "site": ["north", "süd", 'q"uote'][k % 3],
                     "flag": k % 2} for k in range(n)]
        if schema is IMPUTING:  # some leave dose or site out, or send null
            for k, patient in enumerate(patients):
                if k % 3 == 1:
                    del patient["dose"]
                if k % 4 == 2:
                    patient["site"] = None
    ids = [None, 'quote " and unicode é \u2028', *(f"p{k}" for k in range(n - 2))]
    raw = raw_rows(model.encoder, patients, batch_path)
    return model, scoring_service.score_rows(model=model, raw=raw, ids=ids)


# --- today's answer, built by hand (the specification) -----------------------------------------

def legacy_contributions(a: RiskAnswer, k: int) -> list[dict[str, Any]]:
    items = []
    for i in a.order[k]:
        feature = a.encoder.schema.features[i]
        imputed = i in a.imputed.get(k, ())
        reason, severity, shown = explained_value(a.encoder, i, a.raw[k][i], imputed)
        items.append({"feature": feature.name, "label": feature.label or feature.name,
                      "value": shown, "contribution": a.phi[k][i],
                      "contribution_probability": a.phi_p[k][i],
                      "direction": direction_of(a.phi[k][i]), "reason": reason,
                      "severity": severity, "imputed": imputed})
    return items


def legacy_reference(a: RiskAnswer) -> dict[str, Any]:
    return {"features": {f.name: f.reference for f in a.encoder.schema.features},
            "log_odds": a.reference.log_odds, "probability": a.reference.probability,
            "note": REFERENCE_NOTE,
            "explanation": {"method": a.reference.explanation.method,
                            "standard_error": a.reference.explanation.standard_error}}


def legacy_result(a: RiskAnswer, k: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"id": a.ids[k], "probability": a.probability[k], "log_odds": a.log_odds[k],
            "band": a.band(k), "band_thresholds": a.band_thresholds,
            "contributions": legacy_contributions(a, k),
            "imputed": [a.encoder.schema.features[i].name for i in a.imputed.get(k, ())],
            "reference": {"log_odds": a.reference.log_odds,
                          "probability": a.reference.probability},
            "model": {key: block[key] for key in ("id", "version", "epsilon", "delta")}}


def legacy_single(a: RiskAnswer, block: dict[str, Any]) -> dict[str, Any]:
    result = {k: v for k, v in legacy_result(a, 0, block).items() if k != "id"}
    return {**result, "reference": legacy_reference(a), "model": block}


def legacy_document(a: RiskAnswer, block: dict[str, Any]) -> dict[str, Any]:
    return {"model": block, "band_thresholds": a.band_thresholds,
            "reference": legacy_reference(a),
            "results": [legacy_result(a, k, block) for k in range(len(a))]}


# --- the checks --------------------------------------------------------------------------------

CASES = [("logistic", None), ("mlp", None), ("mlp", MIXED), ("mlp", IMPUTING)]


@pytest.mark.parametrize(("kind", "schema"), CASES)
def test_single_answer_is_todays_bytes_and_the_old_typed_result(
        kind: str, schema: DatasetSchema | None) -> None:
    model, answer = _answer(kind, schema, 3)
    single = answer.single()
    expected = legacy_single(answer, model.block)
    assert render.answer_json(single) == _json(expected)
    # FHIR and CDS Hooks used to validate that dict again; they now read the same object.
    assert single == RiskResult.model_validate(expected)
    assert_additive(single.model_dump(), expected["reference"])


@pytest.mark.parametrize(("kind", "schema"), CASES)
def test_batch_answer_is_todays_bytes(kind: str, schema: DatasetSchema | None) -> None:
    model, answer = _answer(kind, schema, 301)
    assert render.batch_json(answer) == _json(legacy_document(answer, model.block))
    typed = answer.document([answer.result(k) for k in range(len(answer))])
    assert render.batch_json(answer) == _json(typed.model_dump(by_alias=True))


@pytest.mark.parametrize(("kind", "schema"), CASES)
def test_compact_answer_is_its_typed_view(kind: str, schema: DatasetSchema | None) -> None:
    _, answer = _answer(kind, schema, 120)
    typed = answer.compact_document([answer.compact_result(k) for k in range(len(answer))])
    written = render.compact_json(answer)
    assert written == _json(typed.model_dump(by_alias=True))
    full = json.loads(render.batch_json(answer))
    compact = json.loads(written)
    assert compact["model"] == full["model"] and compact["reference"] == full["results"][0][
        "reference"]
    for mine, theirs in zip(compact["results"], full["results"], strict=True):
        assert {k: mine[k] for k in ("id", "probability", "band", "imputed")} == {
            k: theirs[k] for k in ("id", "probability", "band", "imputed")}
        top = theirs["contributions"][:TOP_CONTRIBUTIONS]
        assert mine["contributions"] == [
            {k: c[k] for k in ("feature", "direction", "contribution_probability", "reason")}
            for c in top]
