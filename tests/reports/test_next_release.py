"""The privacy overview's "next release can use" follows the patient, under the privacy rules:
the tables' holders read what the dataset's most-spent patients have left; every other role
reads the same report (and so the same upper bound) whether or not one of the dataset's
patients was spent on another table (a flip-one-patient comparison)."""

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.ledger.test_patient_budget import _job, _upload

STATIC = Path(__file__).resolve().parents[2] / "app" / "dashboard" / "static"
OWN = {"dataset_id", "dataset_name"}


def _report(client: TestClient, dataset_id: int) -> Any:
    answer = client.get(f"/v1/datasets/{dataset_id}/privacy-report")
    assert answer.status_code == 200, answer.text
    return answer.json()


def _without_own(value: Any) -> Any:
    """The report without what names the dataset itself (its id and name)."""
    if isinstance(value, dict):
        return {k: _without_own(v) for k, v in value.items() if k not in OWN}
    if isinstance(value, list):
        return [_without_own(v) for v in value]
    return value


def _next_release(reports: list[Any]) -> list[dict[str, Any]]:
    """The dashboard's own ``nextRelease`` (common.js) on each report, run by node."""
    script = ('import { nextRelease } from "./common.js";\n'
              f"const reports = {json.dumps(reports)};\n"
              "console.log(JSON.stringify(reports.map(nextRelease)));\n")
    done = subprocess.run(["node", "--input-type=module", "-e", script], cwd=STATIC,
                          capture_output=True, text=True, timeout=60, check=True)
    return list(json.loads(done.stdout))


def test_one_shared_patient_changes_only_what_the_holders_read(
    client: TestClient, client_as: Callable[[str | None], TestClient]
) -> None:
    first = _upload(client, [f"p-{i}" for i in range(1000)], "first")
    assert _job(client, first, 3).status_code == 202
    # Two tables alike but for one patient: the first also holds p-0, the second does not.
    shares = _upload(client, ["p-0"] + [f"a-{i}" for i in range(999)], "shares", seed=1)
    apart = _upload(client, [f"b-{i}" for i in range(1000)], "apart", seed=1)

    for role in ("data_scientist", "privacy_officer", "clinician"):
        reader = client_as(role)
        seen = [reader.get(f"/v1/datasets/{d}/privacy-report") for d in (shares, apart)]
        if role == "clinician":  # not a reader of dataset reports at all
            assert {s.status_code for s in seen} == {403}
            continue
        assert _without_own(seen[0].json()) == _without_own(seen[1].json()), role

    steward = client_as("data_steward")
    held = [_report(steward, d) for d in (shares, apart)]
    assert held[0]["patient_budget"]["remaining_epsilon"] < 8  # p-0's spend on the first
    assert held[1]["patient_budget"]["remaining_epsilon"] == 8
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the dashboard's figure is not checked")
    scientist = [_report(client_as("data_scientist"), d) for d in (shares, apart)]
    steward_next, scientist_next = _next_release(held), _next_release(scientist)
    assert steward_next[0]["epsilon"] == pytest.approx(held[0]["patient_budget"][
        "remaining_epsilon"]) and not steward_next[0]["bound"]
    assert steward_next[1]["epsilon"] == 8 and not steward_next[1]["bound"]
    assert scientist_next[0] == scientist_next[1] == {"epsilon": 8, "bound": True}
