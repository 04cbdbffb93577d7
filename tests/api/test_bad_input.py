"""Bad input never writes anything and always comes back as a 4xx problem+json, never a 500.

Every test snapshots what the service has stored (jobs, datasets, the dataset's ledger entries)
before the bad request and checks that nothing changed after it.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response

from tests.api.seeded_app import seeded_client
from tests.conftest import FAST_TRAINING, PATIENT, SMALL_DATASET, _sqlite_database, small_dataset

# Its tests together take seconds on 2 cores: the full suite runs them, the fast lane does not.
pytestmark = pytest.mark.slow

PROBLEM_JSON = "application/problem+json"
N_ROWS = SMALL_DATASET["source"]["n_rows"]  # type: ignore[index]
# The dataset's training rows: each registration draws its own per-record coins, so tests read
# ``training_rows`` from the registered dataset and put it where this placeholder stands.
TRAINING_ROWS = "{training_rows}"
NOISY_JOB_TRAINING = {"epochs": 1, "batch_size": 256}


# --------------------------------------------------------------------------- helpers


def snapshot(client: TestClient, dataset_id: int | None = None) -> dict[str, Any]:
    """What the service has stored: job and dataset totals, and one dataset's ledger."""
    jobs = client.get("/v1/jobs")
    datasets = client.get("/v1/datasets")
    assert jobs.status_code == 200, jobs.text
    assert datasets.status_code == 200, datasets.text
    state: dict[str, Any] = {
        "jobs": jobs.json()["total"],
        "datasets": datasets.json()["total"],
    }
    if dataset_id is not None:
        report = client.get(f"/v1/datasets/{dataset_id}/privacy-report")
        assert report.status_code == 200, report.text
        state["entries"] = report.json()["entries"]
        state["spent"] = report.json()["spent"]["epsilon"]
    return state


def assert_problem(
    response: Response,
    status: int,
    *,
    field: str | None = None,
    allowed: tuple[str, ...] = (),
    kind: str | None = None,
) -> dict[str, Any]:
    """A problem+json document with ``status``; optionally naming ``field`` and its range."""
    assert response.status_code < 500, response.text
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON), response.headers
    body = response.json()
    for key in ("type", "title", "status", "detail"):
        assert key in body, body
    assert body["status"] == status, body
    assert isinstance(body["detail"], str) and body["detail"], body
    if kind is not None:
        assert kind in body["type"], body
    if field is not None:
        errors = body.get("errors")
        assert isinstance(errors, list) and errors, body
        named = [e for e in errors if e.get("field") == field]
        assert named, f"no error names {field!r}: {errors}"
        for bound in allowed:
            assert any(bound in str(e.get("allowed", "")) for e in named), (
                f"{field!r} errors do not give the allowed range {bound!r}: {named}"
            )
    return body


def patient(**changes: Any) -> dict[str, Any]:
    features = dict(PATIENT)
    for name, value in changes.items():
        features[name] = value
    return features


def job_body(dataset_id: int, **privacy: Any) -> dict[str, Any]:
    training = privacy.pop("training", NOISY_JOB_TRAINING)
    return {"dataset_id": dataset_id, "privacy": privacy, "training": training}


def train_model(client: TestClient, run_worker: Any, dataset_id: int) -> int:
    body = {"dataset_id": dataset_id, "privacy": {"target_epsilon": 3}, "training": FAST_TRAINING}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert run_worker() == 1
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "succeeded", job
    assert job["model_id"] is not None, job
    return int(job["model_id"])


# --------------------------------------------------------------------------- 1. risk features

FEATURE_RANGES = {
    "age": (18, 80),
    "phq9": (0, 27),
    "gaf": (1, 100),
    "num_sessions": (0, 50),
    "substance_use": (0, 1),
    "prior_crisis": (0, 1),
}

OUT_OF_RANGE = [
    pytest.param(name, value, f"[{lo}, {hi}]", id=f"{name}={value}")
    for name, (lo, hi) in FEATURE_RANGES.items()
    for value in (lo - 1, hi + 1)
]

WRONG_TYPE = [
    pytest.param("phq9", "22", id="string"),
    pytest.param("phq9", "high", id="word"),
    pytest.param("phq9", True, id="boolean-true"),
    pytest.param("substance_use", False, id="boolean-false"),
    pytest.param("phq9", [22], id="list"),
    pytest.param("phq9", {"value": 22}, id="object"),
    pytest.param("phq9", None, id="null"),
    pytest.param("phq9", 22.5, id="non-whole"),
    pytest.param("age", 34.000001, id="nearly-whole"),
]

NON_FINITE = [
    pytest.param("phq9", "NaN", id="phq9-NaN"),
    pytest.param("age", "Infinity", id="age-Infinity"),
    pytest.param("gaf", "-Infinity", id="gaf-minus-Infinity"),
]


def raw_risk_body(name: str, literal: str) -> str:
    """A risk body whose ``name`` feature is the raw JSON token ``literal`` (e.g. NaN)."""
    features = {k: v for k, v in PATIENT.items() if k != name}
    text = json.dumps({"features": features})
    return text[:-2] + f', "{name}": {literal}}}}}'


def bad_feature_requests() -> list[tuple[str, dict[str, Any], str, tuple[str, ...]]]:
    """(label, httpx kwargs, field, allowed bounds) for every bad feature payload."""
    cases: list[tuple[str, dict[str, Any], str, tuple[str, ...]]] = []
    for p in OUT_OF_RANGE:
        name, value, allowed = p.values
        body = {"features": patient(**{name: value})}
        cases.append((p.id, {"json": body}, f"features.{name}", (allowed,)))
    for p in WRONG_TYPE:
        name, value = p.values
        body = {"features": patient(**{name: value})}
        cases.append((p.id, {"json": body}, f"features.{name}", ()))
    for p in NON_FINITE:
        name, literal = p.values
        kwargs = {
            "content": raw_risk_body(name, literal),
            "headers": {"content-type": "application/json"},
        }
        cases.append((p.id, kwargs, f"features.{name}", ()))
    for name in FEATURE_RANGES:
        features = {k: v for k, v in PATIENT.items() if k != name}
        cases.append(
            (f"missing-{name}", {"json": {"features": features}}, f"features.{name}", ())
        )
    cases.append(
        ("extra-feature", {"json": {"features": patient(bmi=31)}}, "features.bmi", ())
    )
    cases.append(("no-features", {"json": {}}, "features", ()))
    cases.append(
        ("extra-top-level", {"json": {"features": PATIENT, "patient_id": 7}}, "patient_id", ())
    )
    cases.append(("model-id-zero", {"json": {"features": PATIENT, "model_id": 0}}, "model_id",
                  ("[1",)))
    return cases


@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """One app with a trained, active model for the module: a patient's features are checked
    against the scoring model's schema, so bad features need a model to be bad against."""
    root: Path = tmp_path_factory.mktemp("bad-features")
    yield from seeded_client(_sqlite_database(root), root)


SEEDED = {"id": 1}  # the seeded app's dataset


@pytest.mark.parametrize(("name", "value", "allowed"), OUT_OF_RANGE)
def test_risk_feature_out_of_public_range(
    scorer: TestClient, name: str, value: int, allowed: str
) -> None:
    before = snapshot(scorer, SEEDED["id"])
    response = scorer.post("/v1/risk", json={"features": patient(**{name: value})})
    assert_problem(response, 422, field=f"features.{name}", allowed=(allowed,))
    assert snapshot(scorer, SEEDED["id"]) == before


@pytest.mark.parametrize("name", list(FEATURE_RANGES))
def test_risk_missing_feature(scorer: TestClient, name: str) -> None:
    before = snapshot(scorer, SEEDED["id"])
    features = {k: v for k, v in PATIENT.items() if k != name}
    response = scorer.post("/v1/risk", json={"features": features})
    lo, hi = FEATURE_RANGES[name]
    assert_problem(response, 422, field=f"features.{name}", allowed=(f"[{lo}, {hi}]",))
    assert snapshot(scorer, SEEDED["id"]) == before


@pytest.mark.parametrize(("name", "value"), WRONG_TYPE)
def test_risk_feature_wrong_type(
    scorer: TestClient, name: str, value: Any
) -> None:
    before = snapshot(scorer, SEEDED["id"])
    response = scorer.post("/v1/risk", json={"features": patient(**{name: value})})
    assert_problem(response, 422, field=f"features.{name}")
    assert snapshot(scorer, SEEDED["id"]) == before


@pytest.mark.parametrize(("name", "literal"), NON_FINITE)
def test_risk_feature_not_finite(
    scorer: TestClient, name: str, literal: str
) -> None:
    text = raw_risk_body(name, literal)
    assert literal in text and json.loads(text)  # Python's json accepts the raw token
    before = snapshot(scorer, SEEDED["id"])
    response = scorer.post(
        "/v1/risk", content=text, headers={"content-type": "application/json"}
    )
    assert_problem(response, 422, field=f"features.{name}")
    assert snapshot(scorer, SEEDED["id"]) == before


def test_risk_unknown_extra_feature(scorer: TestClient) -> None:
    before = snapshot(scorer, SEEDED["id"])
    response = scorer.post("/v1/risk", json={"features": patient(bmi=31)})
    assert_problem(response, 422, field="features.bmi")
    assert snapshot(scorer, SEEDED["id"]) == before


def test_risk_every_error_reported_at_once(scorer: TestClient) -> None:
    features = patient(phq9=28, age=17)
    del features["gaf"]
    response = scorer.post("/v1/risk", json={"features": features})
    body = assert_problem(response, 422, field="features.phq9", allowed=("[0, 27]",))
    fields = {e["field"] for e in body["errors"]}
    assert {"features.phq9", "features.age", "features.gaf"} <= fields, body


def test_risk_valid_request_without_any_model_is_404(
    client: TestClient, dataset: dict[str, Any]
) -> None:
    before = snapshot(client, dataset["id"])
    response = client.post("/v1/risk", json={"features": PATIENT})
    assert_problem(response, 404, field="model_id", kind="model-not-found")
    response = client.post("/v1/risk", json={"features": PATIENT, "model_id": 1})
    assert_problem(response, 404, field="model_id", kind="model-not-found")
    assert snapshot(client, dataset["id"]) == before


def test_risk_bad_input_with_a_trained_model(
    client: TestClient, dataset: dict[str, Any], run_worker: Any
) -> None:
    """With a model in place the same bad inputs are still 422, and an unknown model is 404."""
    model_id = train_model(client, run_worker, dataset["id"])
    ok = client.post("/v1/risk", json={"features": PATIENT})
    assert ok.status_code == 200, ok.text
    assert ok.json()["model"]["id"] == model_id
    before = snapshot(client, dataset["id"])

    for label, kwargs, field, allowed in bad_feature_requests():
        response = client.post("/v1/risk", **kwargs)
        try:
            assert_problem(response, 422, field=field, allowed=allowed)
        except AssertionError as exc:
            raise AssertionError(f"case {label}: {exc}") from exc

    response = client.post("/v1/risk", json={"features": PATIENT, "model_id": model_id + 999})
    assert_problem(response, 404, field="model_id", kind="model-not-found")
    model = client.get(f"/v1/models/{model_id + 999}")
    assert_problem(model, 404, kind="model-not-found")
    assert snapshot(client, dataset["id"]) == before


# --------------------------------------------------------------------------- 2. unknown ids


def test_job_on_unknown_dataset_is_404(client: TestClient, dataset: dict[str, Any]) -> None:
    before = snapshot(client, dataset["id"])
    response = client.post("/v1/jobs", json=job_body(999, noise_multiplier=1.0))
    assert_problem(response, 404, field="dataset_id", kind="dataset-not-found")
    assert snapshot(client, dataset["id"]) == before


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/v1/jobs/999", "job-not-found"),
        ("/v1/jobs/999/privacy-report", "job-not-found"),
        ("/v1/datasets/999", "dataset-not-found"),
        ("/v1/datasets/999/privacy-report", "dataset-not-found"),
        ("/v1/models/999", "model-not-found"),
    ],
)
def test_unknown_ids_are_404(
    client: TestClient, dataset: dict[str, Any], path: str, kind: str
) -> None:
    before = snapshot(client, dataset["id"])
    assert_problem(client.get(path), 404, kind=kind)
    assert snapshot(client, dataset["id"]) == before


def test_cancel_unknown_job_is_404(client: TestClient, dataset: dict[str, Any]) -> None:
    before = snapshot(client, dataset["id"])
    assert_problem(client.post("/v1/jobs/999/cancel"), 404, kind="job-not-found")
    assert snapshot(client, dataset["id"]) == before


@pytest.mark.parametrize("path", ["/v1/jobs/abc", "/v1/datasets/abc", "/v1/models/abc"])
def test_non_integer_id_is_422(client: TestClient, path: str) -> None:
    assert_problem(client.get(path), 422)


# --------------------------------------------------------------------------- 3-9. job privacy


@pytest.mark.parametrize(
    ("privacy", "field", "allowed"),
    [
        pytest.param({"target_epsilon": 0}, "privacy.target_epsilon", ("(0, 100]",), id="eps-0"),
        pytest.param({"target_epsilon": -1}, "privacy.target_epsilon", ("(0, 100]",),
                     id="eps-neg"),
        pytest.param({"target_epsilon": 101}, "privacy.target_epsilon", ("(0, 100]",),
                     id="eps-above-100"),
        pytest.param({"noise_multiplier": -1}, "privacy.noise_multiplier", ("[0, 100]",),
                     id="noise-neg"),
        pytest.param({"noise_multiplier": 1.0, "delta": 0}, "privacy.delta", ("(0, 1)",),
                     id="delta-0"),
        pytest.param({"noise_multiplier": 1.0, "delta": -1e-6}, "privacy.delta", ("(0, 1)",),
                     id="delta-neg"),
        pytest.param({"noise_multiplier": 1.0, "delta": 1}, "privacy.delta", ("(0, 1)",),
                     id="delta-1"),
        pytest.param({"noise_multiplier": 1.0, "delta": 1 / N_ROWS}, "privacy.delta",
                     ("(0, 5e-05]",), id="delta-1/n"),
        pytest.param({"noise_multiplier": 1.0, "delta": 0.001}, "privacy.delta",
                     ("(0, 5e-05]",), id="delta-above-1/n"),
        pytest.param({"noise_multiplier": 1.0, "delta": 0.5}, "privacy.delta",
                     ("(0, 5e-05]",), id="delta-half"),
        pytest.param({"target_epsilon": 3, "noise_multiplier": 1.0}, "privacy", (),
                     id="both-eps-and-noise"),
        pytest.param({}, "privacy", (), id="neither-eps-nor-noise"),
        pytest.param({"delta": 1e-6}, "privacy", (), id="only-delta"),
        pytest.param({"noise_multiplier": 0.1}, "privacy.noise_multiplier", ("[0.3, 100",),
                     id="noise-0.1"),
        pytest.param({"noise_multiplier": 0.29}, "privacy.noise_multiplier", ("[0.3, 100",),
                     id="noise-0.29"),
        pytest.param({"noise_multiplier": 0}, "privacy.noise_multiplier", (), id="non-private"),
        pytest.param({"noise_multiplier": 1.0, "epsilon": 3}, "privacy.epsilon", (),
                     id="unknown-privacy-field"),
        pytest.param({"target_epsilon": "three"}, "privacy.target_epsilon", (),
                     id="eps-string"),
    ],
)
def test_job_bad_privacy(
    client: TestClient,
    dataset: dict[str, Any],
    privacy: dict[str, Any],
    field: str,
    allowed: tuple[str, ...],
) -> None:
    before = snapshot(client, dataset["id"])
    response = client.post("/v1/jobs", json=job_body(dataset["id"], **privacy))
    assert_problem(response, 422, field=field, allowed=allowed)
    assert snapshot(client, dataset["id"]) == before


@pytest.mark.parametrize(
    ("field", "literal"),
    [("target_epsilon", "NaN"), ("target_epsilon", "Infinity"), ("noise_multiplier", "NaN"),
     ("noise_multiplier", "Infinity"), ("delta", "NaN")],
)
def test_job_non_finite_privacy(
    client: TestClient, dataset: dict[str, Any], field: str, literal: str
) -> None:
    other = '"noise_multiplier": 1.0, ' if field == "delta" else ""
    text = (
        f'{{"dataset_id": {dataset["id"]}, "privacy": {{{other}"{field}": {literal}}}, '
        f'"training": {json.dumps(NOISY_JOB_TRAINING)}}}'
    )
    json.loads(text)
    before = snapshot(client, dataset["id"])
    response = client.post("/v1/jobs", content=text, headers={"content-type": "application/json"})
    assert_problem(response, 422, field=f"privacy.{field}")
    assert snapshot(client, dataset["id"]) == before


def test_unreachable_target_epsilon(client: TestClient, dataset: dict[str, Any]) -> None:
    before = snapshot(client, dataset["id"])
    body = job_body(
        dataset["id"], target_epsilon=0.001, training={"epochs": 200, "batch_size": 1024}
    )
    response = client.post("/v1/jobs", json=body)
    problem = assert_problem(response, 422, field="privacy.target_epsilon")
    allowed = problem["errors"][0].get("allowed", "")
    assert allowed.endswith(", 100]"), problem
    assert "0.001" in problem["detail"], problem
    assert snapshot(client, dataset["id"]) == before


def test_non_private_training_refused_on_private_dataset(
    client: TestClient, dataset: dict[str, Any]
) -> None:
    before = snapshot(client, dataset["id"])
    response = client.post("/v1/jobs", json=job_body(dataset["id"], noise_multiplier=0))
    body = assert_problem(response, 422, field="privacy.noise_multiplier")
    assert "public" in body["detail"], body
    assert snapshot(client, dataset["id"]) == before


def test_non_private_training_accepted_on_public_dataset(client: TestClient) -> None:
    public = {
        "name": "public",
        "source": {"kind": "synthetic", "n_rows": 2000, "seed": 3},
        "public": True,
    }
    created = client.post("/v1/datasets", json=public)
    assert created.status_code == 201, created.text
    dataset_id = created.json()["id"]
    before = snapshot(client, dataset_id)
    response = client.post("/v1/jobs", json=job_body(dataset_id, noise_multiplier=0))
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["privacy"]["noise_multiplier"] == 0
    after = snapshot(client, dataset_id)
    assert after["jobs"] == before["jobs"] + 1
    assert len(after["entries"]) == len(before["entries"]) + 1


@pytest.mark.parametrize(
    ("training", "field", "allowed"),
    [
        pytest.param({"batch_size": "training_rows+1"}, "training.batch_size",
                     (f"[8, {TRAINING_ROWS}]",), id="batch-above-training-rows"),
        pytest.param({"batch_size": N_ROWS}, "training.batch_size", (f"[8, {TRAINING_ROWS}]",),
                     id="batch-equals-all-rows"),
        pytest.param({"batch_size": 7}, "training.batch_size", ("[8, 65536]",),
                     id="batch-below-8"),
        pytest.param({"epochs": 0}, "training.epochs", ("[1, 1000]",), id="epochs-0"),
        pytest.param({"epochs": 1001}, "training.epochs", ("[1, 1000]",), id="epochs-1001"),
        pytest.param({"learning_rate": 0}, "training.learning_rate", ("(0, 10]",), id="lr-0"),
        pytest.param({"momentum": 1}, "training.momentum", ("[0, 1)",), id="momentum-1"),
        pytest.param({"max_grad_norm": 0}, "training.max_grad_norm", ("(0, 100]",),
                     id="clip-0"),
        pytest.param({"model": "forest"}, "training.model", (), id="unknown-model"),
        pytest.param({"optimizer": "lbfgs"}, "training.optimizer", (), id="unknown-optimizer"),
        pytest.param({"scheduler": "cosine"}, "training.scheduler", (), id="unknown-field"),
    ],
)
def test_job_bad_training(
    client: TestClient,
    dataset: dict[str, Any],
    training: dict[str, Any],
    field: str,
    allowed: tuple[str, ...],
) -> None:
    before = snapshot(client, dataset["id"])
    rows = dataset["training_rows"]
    if training.get("batch_size") == "training_rows+1":
        training = {**training, "batch_size": rows + 1}
    body = job_body(dataset["id"], noise_multiplier=1.0, training=training)
    response = client.post("/v1/jobs", json=body)
    assert_problem(response, 422, field=field,
                   allowed=tuple(a.format(training_rows=rows) for a in allowed))
    assert snapshot(client, dataset["id"]) == before


def test_batch_size_equal_to_training_rows_is_accepted(
    client: TestClient, dataset: dict[str, Any]
) -> None:
    body = job_body(
        dataset["id"], noise_multiplier=1.0,
        training={"epochs": 1, "batch_size": dataset["training_rows"]}
    )
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text


# --------------------------------------------------------------------------- 10. budget


def test_job_exceeding_remaining_budget_is_409(client: TestClient, dataset: dict[str, Any]) -> None:
    """Each job alone fits the budget of 10 (about 7.4), but two of them compose past it."""
    job = job_body(dataset["id"], noise_multiplier=1.0, training={"epochs": 2, "batch_size": 1024})
    first = client.post("/v1/jobs", json=job)
    assert first.status_code == 202, first.text
    before = snapshot(client, dataset["id"])
    assert len(before["entries"]) == 1
    assert 5 < before["spent"] < 10, before

    response = client.post("/v1/jobs", json=job)
    body = assert_problem(response, 409, kind="budget-exceeded")
    assert "remaining_epsilon" in body, body
    assert body["remaining_epsilon"] == pytest.approx(10 - before["spent"]), body
    assert body["job_epsilon"] < 10 < body["composed_epsilon_with_job"], body
    assert snapshot(client, dataset["id"]) == before


def test_single_job_larger_than_whole_budget_is_409(
    client: TestClient, dataset: dict[str, Any]
) -> None:
    before = snapshot(client, dataset["id"])
    training = {"epochs": 5, "batch_size": 1024}  # about 25 epsilon on its own
    greedy = job_body(dataset["id"], noise_multiplier=0.6, training=training)
    response = client.post("/v1/jobs", json=greedy)
    body = assert_problem(response, 409, kind="budget-exceeded")
    assert body["remaining_epsilon"] == pytest.approx(10.0), body
    assert snapshot(client, dataset["id"]) == before


def test_small_budget_refuses_larger_target(client: TestClient) -> None:
    tight = {**small_dataset(), "name": "tight", "privacy_budget": {"epsilon": 1, "delta": 1e-5}}
    created = client.post("/v1/datasets", json=tight)
    assert created.status_code == 201, created.text
    dataset_id = created.json()["id"]
    before = snapshot(client, dataset_id)
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset_id, "privacy": {"target_epsilon": 3},
              "training": FAST_TRAINING},
    )
    body = assert_problem(response, 409, kind="budget-exceeded")
    assert body["remaining_epsilon"] == pytest.approx(1.0), body
    assert snapshot(client, dataset_id) == before


# --------------------------------------------------------------------------- 11. datasets


def dataset_with(**changes: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(SMALL_DATASET))
    for key, value in changes.items():
        body[key] = value
    return body


@pytest.mark.parametrize(
    ("body", "field", "allowed"),
    [
        pytest.param(dataset_with(privacy_budget={"epsilon": 0, "delta": 1e-5}),
                     "privacy_budget.epsilon", ("(0, 100]",), id="eps-0"),
        pytest.param(dataset_with(privacy_budget={"epsilon": -1, "delta": 1e-5}),
                     "privacy_budget.epsilon", ("(0, 100]",), id="eps-neg"),
        pytest.param(dataset_with(privacy_budget={"epsilon": 101, "delta": 1e-5}),
                     "privacy_budget.epsilon", ("(0, 100]",), id="eps-above-100"),
        pytest.param(dataset_with(privacy_budget={"epsilon": 1, "delta": 0}),
                     "privacy_budget.delta", ("(0, 1)",), id="delta-0"),
        pytest.param(dataset_with(privacy_budget={"epsilon": 1, "delta": -1e-6}),
                     "privacy_budget.delta", ("(0, 1)",), id="delta-neg"),
        pytest.param(dataset_with(privacy_budget={"epsilon": 1, "delta": 1 / N_ROWS}),
                     "privacy_budget.delta", ("(0, 5e-05]",), id="delta-1/n"),
        pytest.param(dataset_with(privacy_budget={"epsilon": 1, "delta": 0.5}),
                     "privacy_budget.delta", ("(0, 5e-05]",), id="delta-half"),
        pytest.param(dataset_with(privacy_budget={"epsilon": 1}),
                     "privacy_budget.delta", (), id="delta-missing"),
        pytest.param(dataset_with(privacy_budget=None), "privacy_budget", (),
                     id="private-null-budget"),
        pytest.param({k: v for k, v in SMALL_DATASET.items() if k != "privacy_budget"},
                     "privacy_budget", (), id="private-no-budget"),
        pytest.param(dataset_with(source={"kind": "ftp", "n_rows": 2000}), "source",
                     (), id="source-unknown-kind"),
        pytest.param(dataset_with(source={"kind": "upload", "n_rows": 2000}), "source.n_rows",
                     (), id="source-upload-with-rows"),
        pytest.param(dataset_with(source={"kind": "synthetic", "n_rows": 99}), "source.n_rows",
                     ("[100, 2000000]",), id="n-rows-99"),
        pytest.param(dataset_with(source={"kind": "synthetic", "n_rows": 2_000_001}),
                     "source.n_rows", ("[100, 2000000]",), id="n-rows-2000001"),
        pytest.param(dataset_with(source={"kind": "synthetic", "n_rows": 500.5}),
                     "source.n_rows", (), id="n-rows-fraction"),
        pytest.param(dataset_with(source={"kind": "synthetic", "n_rows": 2000, "seed": -1}),
                     "source.seed", (), id="seed-neg"),
        pytest.param(dataset_with(source={"kind": "synthetic", "n_rows": 2000, "url": "/x"}),
                     "source.url", (), id="source-extra"),
        pytest.param(dataset_with(name=""), "name", (), id="empty-name"),
        pytest.param(dataset_with(owner="me"), "owner", (), id="unknown-top-level"),
        pytest.param(dataset_with(public="maybe"), "public", (), id="public-not-bool"),
    ],
)
def test_dataset_bad_input(
    client: TestClient,
    dataset: dict[str, Any],
    body: dict[str, Any],
    field: str,
    allowed: tuple[str, ...],
) -> None:
    before = snapshot(client, dataset["id"])
    response = client.post("/v1/datasets", json=body)
    assert_problem(response, 422, field=field, allowed=allowed)
    assert snapshot(client, dataset["id"]) == before


def test_unknown_nested_field_named_path_is_named_in_full(
    client: TestClient, dataset: dict[str, Any]
) -> None:
    """A client uploading a file by path must be told ``source.path`` is unknown, not ``source``.

    The error mapper strips location prefixes ("body", "query", "path", "header") from every
    part of the location, so a field that happens to be called ``path`` loses its name.
    """
    before = snapshot(client, dataset["id"])
    body = dataset_with(source={"kind": "synthetic", "n_rows": 2000, "path": "/data/x.csv"})
    response = client.post("/v1/datasets", json=body)
    assert_problem(response, 422, field="source.path")
    assert snapshot(client, dataset["id"]) == before


def test_dataset_delta_at_a_tenth_of_one_over_n_is_accepted(client: TestClient) -> None:
    body = dataset_with(privacy_budget={"epsilon": 1, "delta": 0.1 / N_ROWS})
    response = client.post("/v1/datasets", json=body)
    assert response.status_code == 201, response.text


def test_job_unknown_top_level_field(client: TestClient, dataset: dict[str, Any]) -> None:
    before = snapshot(client, dataset["id"])
    body = {**job_body(dataset["id"], noise_multiplier=1.0), "priority": "high"}
    response = client.post("/v1/jobs", json=body)
    assert_problem(response, 422, field="priority")
    assert snapshot(client, dataset["id"]) == before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"privacy": {"noise_multiplier": 1.0}}, "dataset_id", id="no-dataset"),
        pytest.param({"dataset_id": 0, "privacy": {"noise_multiplier": 1.0}}, "dataset_id",
                     id="dataset-0"),
        pytest.param({"dataset_id": "one", "privacy": {"noise_multiplier": 1.0}}, "dataset_id",
                     id="dataset-string"),
        pytest.param({"dataset_id": 1}, "privacy", id="no-privacy"),
        pytest.param({"dataset_id": 1, "privacy": 3}, "privacy", id="privacy-not-object"),
    ],
)
def test_job_malformed_body(
    client: TestClient, dataset: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    before = snapshot(client, dataset["id"])
    assert_problem(client.post("/v1/jobs", json=body), 422, field=field)
    assert snapshot(client, dataset["id"]) == before


@pytest.mark.parametrize("path", ["/v1/datasets", "/v1/jobs", "/v1/risk"])
@pytest.mark.parametrize(
    "content",
    [
        pytest.param('{"name": "x", ', id="truncated"),
        pytest.param("{'name': 'x'}", id="single-quotes"),
        pytest.param("not json", id="text"),
        pytest.param("", id="empty"),
        pytest.param("[]", id="array"),
        pytest.param("null", id="null"),
    ],
)
def test_malformed_json_body(
    client: TestClient, dataset: dict[str, Any], path: str, content: str
) -> None:
    before = snapshot(client, dataset["id"])
    response = client.post(path, content=content, headers={"content-type": "application/json"})
    assert_problem(response, 422)
    assert snapshot(client, dataset["id"]) == before


# --------------------------------------------------------------------------- 12. query params


@pytest.mark.parametrize(
    ("query", "field", "allowed"),
    [
        pytest.param("limit=0", "limit", (), id="limit-0"),
        pytest.param("limit=1000", "limit", (), id="limit-1000"),
        pytest.param("limit=abc", "limit", (), id="limit-text"),
        pytest.param("offset=-1", "offset", ("[0, 2147483647]",), id="offset-neg"),
        pytest.param("offset=9223372036854775808", "offset", ("[0, 2147483647]",),
                     id="offset-past-int64"),
        pytest.param("status=done", "status", (), id="unknown-status"),
        pytest.param("dataset_id=0", "dataset_id", (), id="dataset-id-0"),
    ],
)
def test_jobs_bad_query(
    client: TestClient, dataset: dict[str, Any], query: str, field: str, allowed: tuple[str, ...]
) -> None:
    before = snapshot(client, dataset["id"])
    assert_problem(client.get(f"/v1/jobs?{query}"), 422, field=field, allowed=allowed)
    assert snapshot(client, dataset["id"]) == before


@pytest.mark.parametrize("query", ["limit=0", "limit=1000"])
def test_limit_error_gives_the_full_allowed_range(client: TestClient, query: str) -> None:
    """``limit`` is bounded on both sides; the error must say so, like body fields do.

    Body fields get their full range from ALLOWED_RANGES; query parameters fall back to the
    violated bound only, which states a false range ("[1, inf)" for limit=0).
    """
    assert_problem(client.get(f"/v1/jobs?{query}"), 422, field="limit", allowed=("[1, 200]",))


@pytest.mark.parametrize("path", ["/v1/datasets", "/v1/models"])
@pytest.mark.parametrize("query", ["limit=0", "limit=1000", "offset=-1"])
def test_other_lists_bad_query(client: TestClient, path: str, query: str) -> None:
    field = query.split("=")[0]
    assert_problem(client.get(f"{path}?{query}"), 422, field=field)
