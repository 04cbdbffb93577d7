"""The JSON of representative routes keeps its shape and its words across the vocabulary change:
StrEnums serialise to the same strings, and the only keys added are the
``pld`` ones beside their deprecated ``prv`` aliases (nothing removed).

Recorded before the change in ``route_json_before.json`` (``RECORD_ROUTE_JSON=1`` rewrites it);
re-recorded when a change means to alter an answer (the declared outcome's fields, erasure dates,
the one-epsilon wording, the per-patient budget, each ledger entry's release), after checking
that the recording only adds keys and rewords texts.
Numbers are compared by type and digits inside words masked (DP noise and training draw fresh
randomness each run); timestamps and hashes are masked; the noisy held-out metrics, whose
suppressed cells change from run to run, are compared as one opaque value (their typed models
are untouched here); every other string is compared exactly.
"""

import json
import os
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.api.scoring_helpers import QUICK_JOB
from tests.conftest import small_dataset

BEFORE = Path(__file__).with_name("route_json_before.json")
_VOLATILE = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+([+-]\d\d:\d\d|Z)?|[0-9a-f]{8,64})$")
_DIGITS = re.compile(r"-?\d+(\.\d+)?(e-?\d+)?")
_NOISY = frozenset({"metrics"})
_ADDED = re.compile(r"pld")


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: "<noisy>" if key in _NOISY else _mask(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_mask(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return "<number>"
    if isinstance(value, str):
        return "<volatile>" if _VOLATILE.match(value) else _DIGITS.sub("#", value)
    return value


def _record(client: TestClient, run_worker: Any) -> dict[str, Any]:
    dataset_id = client.post("/v1/datasets", json=small_dataset()).json()["id"]
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id, **QUICK_JOB})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    assert run_worker() == 1
    view = client.get(f"/v1/jobs/{job_id}").json()
    release = client.post(f"/v1/datasets/{dataset_id}/statistics",
                          json={"queries": [{"kind": "count"}, {"kind": "prevalence"}],
                                "privacy": {"epsilon": 0.5}})
    assert release.status_code == 201, release.text
    routes = {
        "job": view,
        "job_privacy_report": client.get(f"/v1/jobs/{job_id}/privacy-report").json(),
        "dataset_privacy_report": client.get(f"/v1/datasets/{dataset_id}/privacy-report").json(),
        "model": client.get(f"/v1/models/{view['model_id']}").json(),
        "statistics_release": release.json(),
        "ledger_verify": client.get(f"/v1/datasets/{dataset_id}/ledger/verify").json(),
    }
    return routes


def _drop_added(after: Any, before: Any) -> Any:
    """``after`` less the keys it adds that name ``pld``; any other added key stays (and fails)."""
    if isinstance(after, dict) and isinstance(before, dict):
        return {key: _drop_added(item, before.get(key))
                for key, item in after.items() if key in before or not _ADDED.search(key)}
    if isinstance(after, list) and isinstance(before, list) and len(after) == len(before):
        return [_drop_added(a, b) for a, b in zip(after, before, strict=True)]
    return after


def test_route_json_is_unchanged_but_for_the_pld_keys(client: TestClient,
                                                      run_worker: Any) -> None:
    raw = _record(client, run_worker)
    after = _mask(raw)
    if os.environ.get("RECORD_ROUTE_JSON") == "1":
        BEFORE.write_text(json.dumps(after, indent=1, sort_keys=True) + "\n")
    before = _mask(json.loads(BEFORE.read_text()))
    assert _drop_added(after, before) == before
    # The alias carries the same figure as the new key, wherever the new key appears.
    report, ledger = raw["job_privacy_report"], raw["dataset_privacy_report"]["entries"]
    pairs = [raw["job"]["privacy"]["epsilon_planned"], report["epsilon"],
             *report["epsilon_per_epoch"], *(entry["epsilon"] for entry in ledger)]
    assert all(pair["pld"] == pair["prv"] for pair in pairs), pairs


def test_openapi_marks_prv_deprecated_and_lists_the_vocabularies(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for model in ("EpsilonByAccountant", "EpochEpsilon"):
        properties = schemas[model]["properties"]
        assert properties["prv"].get("deprecated") is True, properties
        assert not properties["pld"].get("deprecated"), properties
    words = {name: schemas[name]["enum"] for name in
             ("JobStatus", "JobKind", "DatasetState", "EntryStatus")}
    assert words == {
        "JobStatus": ["queued", "running", "succeeded", "failed", "cancelled"],
        "JobKind": ["train", "privacy_audit", "monitoring", "comparison", "federated"],
        "DatasetState": ["awaiting_data", "receiving", "ready", "erased", "withdrawn"],
        "EntryStatus": ["reserved", "committed", "released"],
    }
