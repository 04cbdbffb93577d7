"""A job's stored result is typed key by key (``app.jobs.results``): what the worker makes
validates and reads back unchanged, and a key nobody classified is refused where the job is
finished, so a figure cannot slip into a response inside the metrics object."""

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from app.bands import DEFAULT_BAND_THRESHOLDS
from app.core.database import Database
from app.jobs import kinds, queue, results
from app.jobs.models import SUCCEEDED, Job
from tests.jobs.test_queue import _submit
from worker.calibration import Calibration
from worker.evaluation import evaluate
from worker.held_out_floors import held_out_warnings

ROOT = Path(__file__).resolve().parents[2]


def held_out_metrics(noise_multiplier: float = 1.0) -> dict[str, Any]:
    """Held-out metrics as the worker stores them (``worker.tasks``), on 400 made-up rows."""
    rng = np.random.default_rng(7)
    y = (rng.random(400) < 0.2).astype(np.int64)
    p = np.clip(0.05 + 0.6 * y * rng.random(400) + 0.1 * rng.random(400), 0.0, 1.0)
    metrics = evaluate(y, p, groups={"sex": (rng.integers(0, 2, 400), ["female", "male"])},
                       noise_multiplier=noise_multiplier, band_thresholds=DEFAULT_BAND_THRESHOLDS,
                       rng=rng, n_bootstrap=20)
    calibration = Calibration(
        method="dp-platt-binned-v2", rows=120, noise_multiplier=noise_multiplier, slope=0.98,
        intercept=-0.4, bin_edges_logit=[-1.0, 0.0, 1.0], noisy_counts=[30.2, 50.1, 20.0, 19.7],
        noisy_positives=[1.1, 4.9, 8.0, 9.9])
    metrics["calibration"] = calibration.as_dict()
    metrics["held_out_warnings"] = held_out_warnings(  # the evaluation's 400 rows: none
        calibration=calibration, metrics=metrics, evaluation_rows=400, epsilon=2.0)
    metrics["search"] = None  # one run, no hyper-parameter search
    metrics["federation"] = None  # one site
    return metrics


@pytest.mark.parametrize("noise_multiplier", [1.0, 0.0])  # 0: exact, on a public dataset
def test_the_workers_metrics_validate_and_read_back_unchanged(noise_multiplier: float) -> None:
    stored = json.loads(json.dumps(held_out_metrics(noise_multiplier)))  # as the JSON column
    kinds.check("train", stored)
    served = results.HeldOutEvaluation.model_validate(stored).model_dump(mode="json")
    assert json.dumps(served, sort_keys=True) == json.dumps(stored, sort_keys=True)


def test_the_calibration_record_is_the_workers_dataclass() -> None:
    assert [f.name for f in dataclasses.fields(Calibration)] == list(
        results.CalibrationRecord.model_fields)


def _returned_keys(path: str, function: str) -> tuple[set[str], dict[str, set[str]]]:
    """The keys of the dict literal ``function`` returns, and of the dict literals in it."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    returned = next(n.value for n in node.body if isinstance(n, ast.Return))
    assert isinstance(returned, ast.Dict)
    keys = {str(k.value) for k in returned.keys if isinstance(k, ast.Constant)}
    nested = {str(k.value): {str(kk.value) for kk in v.keys if isinstance(kk, ast.Constant)}
              for k, v in zip(returned.keys, returned.values, strict=True)
              if isinstance(k, ast.Constant) and isinstance(v, ast.Dict)}
    return keys, nested


def test_the_audit_results_are_what_the_audit_returns() -> None:
    keys, nested = _returned_keys("worker/privacy_audit/audit.py", "run")
    assert keys | {"audited_job_id"} == set(results.AuditResults.model_fields)  # worker job adds it
    assert nested["settings"] == set(results.AuditSettings.model_fields)
    job = (ROOT / "worker/privacy_audit/job.py").read_text(encoding="utf-8")
    assert 'result["audited_job_id"]' in job


def test_an_injected_key_is_refused_anywhere_in_the_object() -> None:
    metrics = held_out_metrics()
    for planted in ({**metrics, "n_positive": 41},
                    {**metrics, "release": {**metrics["release"], "n_rows": 400}},
                    {**metrics, "calibration": {**metrics["calibration"], "positives": 9}},
                    {**metrics, "subgroups": [{**metrics["subgroups"][0], "exact_rows": 200}]}):
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            kinds.check("train", planted)


def test_a_stored_object_of_no_typed_shape_is_withheld_from_responses() -> None:
    """Metrics an old worker computed exactly (before the DP evaluation), or anything planted
    past ``check``, are served as null rather than unclassified."""
    served = TypeAdapter(results.ServedResults)
    assert served.validate_python({**held_out_metrics(), "n_positive": 41}) is None
    assert served.validate_python({"split": "holdout", "roc_auc": 0.81, "ece": 0.02}) is None
    assert served.validate_python(held_out_metrics()) is not None


def test_finishing_a_job_refuses_an_unclassified_metric(db: Database) -> None:
    (job_id,) = _submit(db)
    with db.session_scope() as session:
        assert queue.claim(session=session, worker_id="w1", lease_seconds=60) is not None
    with pytest.raises(ValidationError, match="n_positive"), db.session_scope() as session:
        queue.finish(session=session, job_id=job_id, worker_id="w1", status=SUCCEEDED,
                     metrics={**held_out_metrics(), "n_positive": 41})
    with db.session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == "running" and job.metrics is None
