"""Every report page escapes what it shows: dataset names and every other string of the report
dicts, full of markup, never reach a page as markup (the templates autoescape; see
``app.reports.html``). Real reports: a public dataset, a trained job and a privacy audit."""

from collections.abc import Iterator
from enum import Enum
from html import escape
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.core.database import Database
from app.datasets import service as dataset_service
from app.jobs import service as job_service
from app.privacy_audit import service as audit_service
from app.reports import audit_html, audit_report, privacy_html, privacy_report
from app.reports.audit_schemas import AuditReport
from app.reports.schemas import DatasetPrivacyReport, JobPrivacyReport
from tests.reports.html_tags import start_tags

EVIL = "<script>alert(1)</script>\"'&"
ESCAPED = escape(EVIL)  # &lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;
HOSTILE_ROOT = "/r<x>\"'"
HTML = {"Accept": "text/html"}
DATASET = {"name": EVIL, "source": {"kind": "synthetic", "n_rows": 600, "seed": 21},
           "public": True}
QUICK = {"canaries": 200, "shadow_models": 2, "seed": 1}


def _assert_escaped(page: str, escaped: str = ESCAPED) -> None:
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "alert(1)</" not in page and EVIL not in page
    assert escaped in page
    tags = start_tags(page)
    assert "script" not in tags and "x" not in tags


def _hostile(value: Any) -> Any:
    """``value`` with markup appended to every string in it (keys are left as they are; so are
    the words of a closed vocabulary, a ``StrEnum`` whose field refuses any other word)."""
    if isinstance(value, Enum):
        return value
    if isinstance(value, dict):
        return {key: _hostile(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_hostile(item) for item in value)
    return value + EVIL if isinstance(value, str) else value


@pytest.fixture
def audited(client: TestClient, run_worker: Any) -> dict[str, int]:
    """A public dataset named with markup, a finished job on it and its finished audit."""
    dataset = client.post("/v1/datasets", json=DATASET)
    assert dataset.status_code == 201, dataset.text
    job = client.post("/v1/jobs", json={"dataset_id": dataset.json()["id"],
                                        "privacy": {"target_epsilon": 1.0},
                                        "training": {"epochs": 3}})
    assert job.status_code == 202, job.text
    audit = client.post("/v1/audits", json={"job_id": job.json()["id"], **QUICK})
    assert audit.status_code == 202, audit.text
    assert run_worker() == 2
    return {"dataset": dataset.json()["id"], "job": job.json()["id"],
            "audit": audit.json()["id"]}


def test_every_page_escapes_a_dataset_name_full_of_markup(
    client: TestClient, audited: dict[str, int]
) -> None:
    paths = {
        "job": f"/v1/jobs/{audited['job']}/privacy-report",
        "dataset": f"/v1/datasets/{audited['dataset']}/privacy-report",
        "audit": f"/v1/audits/{audited['audit']}/report",
    }
    for kind, path in paths.items():
        response = client.get(path, headers=HTML)
        assert response.status_code == 200, (kind, response.text)
        assert response.headers["content-type"].startswith("text/html")
        _assert_escaped(response.text)
        assert f"{ESCAPED} (id {audited['dataset']})" in response.text, kind


@pytest.fixture
def reports(db: Database, audited: dict[str, int]) -> Iterator[dict[str, dict[str, Any]]]:
    """The three reports from the real builders as dicts, every string in them made hostile
    (the test validates them back into the report models to render them)."""
    with db.session_scope() as session:
        dataset = dataset_service.get(session=session, dataset_id=audited["dataset"])
        job = job_service.get(session=session, job_id=audited["job"])
        audit = audit_service.get(session=session, audit_id=audited["audit"])
        built = {
            "job": privacy_report.job_report(session=session, job=job, dataset=dataset),
            "dataset": privacy_report.dataset_report(session=session, dataset=dataset),
            "audit": audit_report.audit_report(job=audit, dataset=dataset),
        }
        yield {kind: _hostile(report.model_dump()) for kind, report in built.items()}


@pytest.mark.parametrize("alarm", [False, True])
def test_every_string_of_every_report_is_escaped(
    reports: dict[str, dict[str, Any]], alarm: bool
) -> None:
    job, dataset, audit = reports["job"], reports["dataset"], reports["audit"]
    assert job["model_card"]["metrics"]["values"], "the job has held-out metrics to show"
    assert dataset["entries"] and dataset["timeline"] and dataset["privacy_audits"]
    assert audit["membership"] and audit["one_run"]
    for entry in dataset["privacy_audits"]:
        entry["alarm"] = alarm
    audit["alarm"] = alarm
    audit["error"] = {"code": EVIL, "message": EVIL} if alarm else None

    job_page = privacy_html.render_job_page(JobPrivacyReport.model_validate(job),
                                            root_path=HOSTILE_ROOT)
    dataset_page = privacy_html.render_dataset_page(
        DatasetPrivacyReport.model_validate(dataset), root_path=HOSTILE_ROOT
    )
    audit_page = audit_html.render_audit_page(AuditReport.model_validate(audit))
    for page in (job_page, dataset_page, audit_page):
        _assert_escaped(page)
        assert escape(HOSTILE_ROOT) in page or page is audit_page
        assert "<x>" not in page
    # Text, attributes and the inline SVG alike.
    assert f"<p>{escape(job['statement'])}</p>" in job_page
    assert f'<p class="sub">Dataset <a href="{escape(HOSTILE_ROOT)}/v1/datasets/' in job_page
    assert f"<dd>{escape(job['mechanism'])}</dd>" in job_page
    assert f"<li>{escape(job['model_card']['caveats'][0])}</li>" in job_page
    assert f"({escape(dataset['spent']['epsilon_text'])})" in dataset_page  # the chart's <desc>
    assert f"<td>{escape(dataset['entries'][0]['mechanism'])}</td>" in dataset_page
    assert f'href="{escape(HOSTILE_ROOT + dataset["privacy_audits"][0]["report"])}"' in (
        dataset_page
    )
    assert f'<a href="{escape(audit["links"]["dataset_report"])}">' in audit_page
    assert f"<p>{escape(audit['statement'])}</p>" in audit_page
    assert ('<span class="alarm">PRIVACY BUG</span>' in dataset_page) is alarm
    assert (f'<p class="alarm">{ESCAPED}: {ESCAPED}</p>' in audit_page) is alarm
