"""A feature declared ``"missing": "reference"`` may be left out or sent as null at scoring: it
is scored at its reference value, as ingestion imputed it for training, and the answer says
which inputs were. Every other feature stays required."""

from typing import Any

import numpy as np
import pytest
from fastapi.exceptions import RequestValidationError

from app.datasets.schema.encoding import BUILT_IN_ENCODER
from app.scoring import service as scoring_service
from app.scoring.answer import RiskAnswer
from app.scoring.patients import features_model, impute, raw_rows
from app.scoring.service import batch_path
from tests.conftest import PATIENT
from tests.scoring.test_answer_bytes import IMPUTING, _model

GIVEN = {"dose": 0.5, "site": "north", "flag": 1}
"""A patient who gives dose and site at their reference values."""


def _score(patients: list[dict[str, Any]]) -> RiskAnswer:
    model = _model("mlp", IMPUTING)
    raw = raw_rows(model.encoder, patients, batch_path)
    return scoring_service.score_rows(model=model, raw=raw)


def test_left_out_or_null_is_scored_as_the_reference_value() -> None:
    answer = _score([GIVEN, {"flag": 1}, {"dose": None, "site": None, "flag": 1},
                     {"dose": 2.0, "flag": 1}])
    assert answer.probability[1] == answer.probability[0] == answer.probability[2]
    assert answer.phi[1] == answer.phi[0] == answer.phi[2]
    assert [answer.single(k).imputed for k in range(4)] == [
        [], ["dose", "site"], ["dose", "site"], ["site"]]
    assert answer.result(3).imputed == answer.compact_result(3).imputed == ["site"]

    given = {c.feature: c for c in answer.single(0).contributions}
    left_out = {c.feature: c for c in answer.single(1).contributions}
    assert not any(c.imputed for c in given.values())
    assert given["dose"].reason == "Dose 0.5 mg"
    assert left_out["dose"].imputed and left_out["site"].imputed and not left_out["flag"].imputed
    assert left_out["dose"].reason == "Dose not given: scored at the reference value 0.5 mg"
    assert left_out["site"].reason == "site not given: scored at the reference value north"
    assert left_out["dose"].value == 0.5 and left_out["dose"].direction == "neutral"
    assert left_out["flag"] == given["flag"]


def test_a_required_feature_stays_required() -> None:
    with pytest.raises(RequestValidationError) as raised:
        _score([{"dose": 1.0, "site": "north"}, {"dose": None, "site": None, "flag": None},
                {"dose": "a lot", "flag": 0}])
    errors = {e["loc"][2:]: e for e in raised.value.errors()}
    assert set(errors) == {(0, "features", "flag"), (1, "features", "flag"),
                           (2, "features", "dose")}
    assert errors[(0, "features", "flag")]["type"] == "missing"
    assert errors[(1, "features", "flag")]["msg"] == "Flag must be 0 (no) or 1 (yes)"
    assert errors[(2, "features", "dose")]["msg"] == (
        "Dose must be a number from 0 to 2.5 mg, or left out (null)")


def test_a_schema_without_imputable_features_pays_nothing() -> None:
    assert not features_model(BUILT_IN_ENCODER).imputes
    raw = raw_rows(BUILT_IN_ENCODER, [PATIENT], batch_path)
    filled, imputed = impute(BUILT_IN_ENCODER, raw)
    assert filled is raw and imputed == {}
    with pytest.raises(RequestValidationError):
        raw_rows(BUILT_IN_ENCODER, [{**PATIENT, "phq9": None}], batch_path)


def test_impute_fills_only_what_was_not_given() -> None:
    encoder = _model("mlp", IMPUTING).encoder
    raw = np.array([[np.nan, 1.0, 0.0], [2.0, np.nan, 1.0], [2.0, 2.0, 1.0]])
    filled, imputed = impute(encoder, raw)
    assert filled.tolist() == [[0.5, 1.0, 0.0], [2.0, 0.0, 1.0], [2.0, 2.0, 1.0]]
    assert imputed == {0: (0,), 1: (1,)}
